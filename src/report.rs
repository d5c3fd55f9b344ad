//! The derivation report of `ksc jacobian`: every rule that fired while
//! simplifying `[D f]`, with the law's statement, the subterm before and
//! after, and the term's size after each phase (`--trace`), or only the
//! places where one rule fired (`--explain RULE`); and the same as one
//! self-contained XHTML page (`--html`).

use ksc_db::Trace;
use ksc_opt::Fired;
use svg::node::element::Element;
use svg::node::{Node, Text};

/// The most characters of a subterm a report shows.
const SUBTERM: usize = 600;

/// The names of the rules that may fire while simplifying a Jacobian: the
/// laws of linear maps and the Core rules.
pub fn rule_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = ksc_linmap::laws::LAWS.iter().map(|l| l.name).collect();
    names.extend(ksc_opt::CORE_RULES.iter().map(|r| r.name));
    names
}

/// Checks `--explain RULE`'s rule: an error listing the known names if it
/// is not one.
pub fn check_rule(rule: &str) -> Result<(), String> {
    let names = rule_names();
    if names.contains(&rule) {
        return Ok(());
    }
    Err(format!("unknown rule `{rule}`; the rules are: {}", names.join(", ")))
}

/// `s` cut to [`SUBTERM`] characters, saying how much was left out.
fn truncated(s: &str) -> String {
    let n = s.chars().count();
    if n <= SUBTERM {
        return s.to_string();
    }
    format!("{} ... [{} more characters]", s.chars().take(SUBTERM).collect::<String>(), n - SUBTERM)
}

/// `s` with every line after the first indented by `indent`.
fn indented(s: &str, indent: &str) -> String {
    s.lines().collect::<Vec<_>>().join(&format!("\n{indent}"))
}

/// One firing, numbered from 1, as text.
fn entry(k: usize, f: &Fired) -> String {
    let pad = "              ";
    let what = if f.kind == ksc_opt::RuleKind::Law { "law:   " } else { "rule:  " };
    let by = if f.strategy.is_empty() { String::new() } else { format!(" (in {})", f.strategy) };
    format!(
        "{k:>4}. {} {}{by}\n      {what} {}\n      before: {}\n      after:  {}\n",
        f.kind,
        f.rule,
        indented(&f.statement, pad),
        indented(&truncated(&f.before), pad),
        indented(&truncated(&f.after), pad)
    )
}

/// The `--trace` report of simplifying `name` (of `raw_size` nodes as
/// derived): the rules in order, a line after each phase.
pub fn trace_text(name: &str, raw_size: usize, trace: &Trace) -> String {
    let mut out = format!("; simplifying {name} ({raw_size} nodes as derived): {} rules fired\n", trace.fired.len());
    let mut k = 0;
    for phase in &trace.phases {
        while k < phase.fired.min(trace.fired.len()) {
            out.push_str(&entry(k + 1, &trace.fired[k]));
            k += 1;
        }
        out.push_str(&format!("; after {}: {} nodes ({} rules so far)\n", phase.name, phase.size, phase.fired));
        for n in &phase.normalizes {
            let by = if n.strategy.is_empty() { String::new() } else { format!(" of {}", n.strategy) };
            out.push_str(&format!(";   its normalize{by}: {} rewrites of its fuel of {}\n", n.rewrites, n.fuel));
        }
    }
    for (i, f) in trace.fired.iter().enumerate().skip(k) {
        out.push_str(&entry(i + 1, f));
    }
    out
}

/// The `--explain RULE` report: the places where `rule` fired, numbered as
/// in `--trace`.
pub fn explain_text(name: &str, rule: &str, trace: &Trace) -> String {
    let places: Vec<(usize, &Fired)> = trace.fired.iter().enumerate().filter(|(_, f)| f.rule == rule).collect();
    let statement = places.first().map(|(_, f)| f.statement.clone()).or_else(|| statement_of(rule));
    let times = match places.len() {
        0 => "did not fire".to_string(),
        1 => "fired once".to_string(),
        n => format!("fired {n} times"),
    };
    let mut out = format!("; {rule} {times} of the {} rules that fired while simplifying {name}\n", trace.fired.len());
    if let Some(s) = statement {
        out.push_str(&format!("; law: {s}\n"));
    }
    for (i, f) in places {
        out.push_str(&entry(i + 1, f));
    }
    out
}

/// The statement of a rule from the tables.
fn statement_of(rule: &str) -> Option<String> {
    if let Some(l) = ksc_linmap::laws::LAWS.iter().find(|l| l.name == rule) {
        return Some(l.statement.to_string());
    }
    ksc_opt::core_rule(rule).map(|r| r.statement.to_string())
}

// ---------------------------------------------------------------------------
// The page.

/// An XHTML element.
fn el(name: &str) -> Element {
    Element::new(name)
}

fn with_text(name: &str, content: &str) -> Element {
    let mut e = el(name);
    e.append(Text::new(content));
    e
}

fn with_class(mut e: Element, class: &str) -> Element {
    e.assign("class", class);
    e
}

/// What the page shows.
pub struct Page<'a> {
    pub file: &'a str,
    pub name: &'a str,
    pub source: &'a str,
    pub raw: &'a str,
    pub raw_size: usize,
    pub simplified: &'a str,
    pub trace: &'a Trace,
    /// With `--at`: the point and its picture.
    pub matrix: Option<(&'a str, svg::Document)>,
    pub graph: svg::Document,
}

const STYLE: &str = "body { font-family: sans-serif; margin: 1.5em; color: #202020; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
.side { display: flex; gap: 1em; } .column { flex: 1; min-width: 0; }
ol.rules li { margin-bottom: 0.8em; } .law { color: #1f5fa0; } .phase { color: #707070; font-style: italic; list-style: none; }
.kind { font-size: 0.8em; color: #707070; } .picture { overflow-x: auto; }
table { border-collapse: collapse; } td, th { border: 1px solid #d0d0d0; padding: 0.2em 0.6em; text-align: right; }";

/// The page as well-formed XHTML: the source of the function, the raw and
/// simplified Jacobian side by side, the rules in order with the phases,
/// and the pictures.
pub fn html(p: &Page) -> String {
    let mut html = el("html");
    html.assign("xmlns", "http://www.w3.org/1999/xhtml");
    html.assign("lang", "en");
    let mut head = el("head");
    let mut meta = el("meta");
    meta.assign("charset", "utf-8");
    head.append(meta);
    head.append(with_text("title", &format!("Jacobian of {} ({})", p.name, p.file)));
    head.append(with_text("style", STYLE));
    html.append(head);

    let mut body = el("body");
    body.append(with_text("h1", &format!("The Jacobian of {} in {}", p.name, p.file)));
    body.append(with_text("h2", "The function"));
    body.append(with_class(with_text("pre", p.source), "source"));

    body.append(with_text("h2", "Its Jacobian, as derived and simplified"));
    let mut side = with_class(el("div"), "side");
    let mut left = with_class(el("div"), "column");
    left.append(with_text("h3", &format!("As derived ({} nodes)", p.raw_size)));
    left.append(with_class(with_text("pre", p.raw), "raw"));
    let mut right = with_class(el("div"), "column");
    let size = p.trace.phases.last().map(|ph| format!(" ({} nodes)", ph.size)).unwrap_or_default();
    right.append(with_text("h3", &format!("Simplified{size}")));
    right.append(with_class(with_text("pre", p.simplified), "simplified"));
    side.append(left);
    side.append(right);
    body.append(side);

    if let Some((point, picture)) = &p.matrix {
        body.append(with_text("h2", &format!("At {point}")));
        let mut div = with_class(el("div"), "picture matrix");
        div.append(picture.clone());
        body.append(div);
    }
    body.append(with_text("h2", "The simplified Jacobian as a graph of linear maps"));
    let mut div = with_class(el("div"), "picture graph");
    div.append(p.graph.clone());
    body.append(div);

    body.append(with_text("h2", &format!("The rules that fired ({})", p.trace.fired.len())));
    let mut list = with_class(el("ol"), "rules");
    let mut k = 0;
    // Numbered as in --trace (the phases between the rules are items too).
    let rule_item = |k: usize, f: &Fired| {
        let mut li = with_class(el("li"), "rule");
        li.assign("value", k + 1);
        let mut name = el("p");
        name.append(with_class(with_text("span", &format!("{} ", f.kind)), "kind"));
        name.append(with_class(with_text("strong", &f.rule), "name"));
        li.append(name);
        li.append(with_class(with_text("pre", &f.statement), "law"));
        let mut both = with_class(el("div"), "side");
        for (what, term) in [("before", &f.before), ("after", &f.after)] {
            let mut d = with_class(el("div"), "column");
            d.append(with_class(with_text("pre", &truncated(term)), what));
            both.append(d);
        }
        li.append(both);
        li
    };
    for phase in &p.trace.phases {
        while k < phase.fired.min(p.trace.fired.len()) {
            list.append(rule_item(k, &p.trace.fired[k]));
            k += 1;
        }
        let text = format!("after {}: {} nodes", phase.name, phase.size);
        list.append(with_class(with_text("li", &text), "phase"));
    }
    for (i, f) in p.trace.fired.iter().enumerate().skip(k) {
        list.append(rule_item(i, f));
    }
    body.append(list);
    html.append(body);
    format!("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<!DOCTYPE html>\n{html}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_rule_lists_the_known_ones() {
        let e = check_rule("no-such-rule").unwrap_err();
        assert!(e.contains("unknown rule `no-such-rule`") && e.contains("compose-scales"), "{e}");
        assert!(check_rule("compose-scales").is_ok());
    }

    #[test]
    fn long_subterms_are_cut() {
        let s = "x".repeat(SUBTERM + 5);
        assert!(truncated(&s).ends_with("... [5 more characters]"));
    }
}
