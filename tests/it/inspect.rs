//! `ksc jacobian`'s pictures and reports: `--svg`, `--graph`, `--html`,
//! `--trace` and `--explain`. The SVG and HTML are parsed as XML
//! (roxmltree) and the expected elements looked for.

use std::path::{Path, PathBuf};

use crate::common::{ks_files, ksc, ksc_env, root, work_dir};

const SCALED_AT: &str = "(tuple 2.0 (Vec_init 0.0 1.0 3.0))";

/// Runs `ksc args`, which must succeed; its stdout and stderr.
fn run(args: &[&str]) -> (String, String) {
    let out = ksc(args);
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "ksc {}: {}\n{stdout}{stderr}", args.join(" "), out.status);
    (stdout, stderr)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` parsed as XML (the page's `<!DOCTYPE html>` allowed).
fn parse(text: &str) -> roxmltree::Document<'_> {
    try_parse(text).unwrap_or_else(|e| panic!("not well-formed XML: {e}\n{text}"))
}

fn try_parse(text: &str) -> Result<roxmltree::Document<'_>, roxmltree::Error> {
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..roxmltree::ParsingOptions::default() };
    roxmltree::Document::parse_with_options(text, options)
}

fn class_is(n: &roxmltree::Node, class: &str) -> bool {
    n.attribute("class").is_some_and(|c| c.split(' ').any(|w| w == class))
}

/// The element of class `class` (the first).
fn of_class<'a, 'i>(doc: &'a roxmltree::Document<'i>, class: &str) -> roxmltree::Node<'a, 'i> {
    doc.descendants().find(|n| class_is(n, class)).unwrap_or_else(|| panic!("no element of class `{class}`"))
}

/// The trimmed texts of the elements of class `class` under `n`.
fn texts(n: roxmltree::Node, class: &str) -> Vec<String> {
    n.descendants()
        .filter(|d| class_is(d, class))
        .map(|d| {
            d.descendants().filter(|t| t.is_text()).filter_map(|t| t.text()).collect::<String>().trim().to_string()
        })
        .collect()
}

fn cells(n: roxmltree::Node) -> usize {
    n.descendants().filter(|d| d.has_tag_name("rect") && class_is(d, "cell")).count()
}

#[test]
fn the_svg_is_a_heat_map_and_two_patterns_with_labelled_blocks() {
    let dir = work_dir("inspect-svg");
    let svg = dir.join("scaled.svg");
    let (stdout, _) =
        run(&["jacobian", "ksc-examples/ad/vectors.ks", "scaled", "--at", SCALED_AT, "--svg", svg.to_str().unwrap()]);
    assert!(stdout.contains("result[2]"), "the matrix is still printed: {stdout}");
    let text = read(&svg);
    let doc = parse(&text);
    assert!(doc.root_element().has_tag_name(("http://www.w3.org/2000/svg", "svg")));
    // d(a sin v_i)/da = sin v_i (0 for v_0 = 0), d/dv_i = a cos v_i: 5 nonzeros.
    let heat = of_class(&doc, "heatmap");
    assert_eq!(cells(heat), 5, "{text}");
    let tips: Vec<&str> = heat.descendants().filter(|n| n.has_tag_name("title")).filter_map(|n| n.text()).collect();
    assert!(tips.contains(&"result[1] / v[1] = 1.0806"), "{tips:?}");
    assert_eq!(texts(heat, "block-label"), ["result", "a", "v"]);
    // One line between the parameters' blocks; the result is one block.
    assert_eq!(heat.descendants().filter(|n| class_is(n, "block-line")).count(), 1);
    assert_eq!(of_class(&doc, "legend").descendants().filter(|n| n.has_tag_name("rect")).count(), 11);
    // The structural pattern ([jacsparse scaled]: element i reads a and
    // v_i) and the pattern at the point.
    let structural = of_class(&doc, "structural");
    assert_eq!(cells(structural), 6, "{text}");
    assert!(texts(structural, "panel-title")[0].contains("6 may be nonzero"));
    assert_eq!(cells(of_class(&doc, "numerical")), 5);
    assert_eq!(texts(of_class(&doc, "numerical"), "block-label"), ["result", "a", "v"]);
}

#[test]
fn a_large_jacobian_is_drawn_in_cells_of_several_entries() {
    // 150 x 150: cells of 2 x 2 entries, 75 per side.
    let dir = work_dir("inspect-large");
    let svg = dir.join("large.svg");
    let at = "(build 150 (lam (i : Integer) (sub (to_float i) 20.0)))";
    run(&["jacobian", "ksc-examples/ad/vectors.ks", "relu_all", "--at", at, "--svg", svg.to_str().unwrap()]);
    let text = read(&svg);
    let doc = parse(&text);
    let caption = texts(doc.root_element(), "caption").join(" ");
    assert!(caption.contains("150 x 150; each cell 2 x 2 entries"), "{caption}");
    // relu's Jacobian is diagonal: so are both patterns, in cells.
    assert_eq!(cells(of_class(&doc, "numerical")), 75);
    assert_eq!(cells(of_class(&doc, "structural")), 75);
}

#[test]
fn the_graph_has_a_node_per_combinator_and_shapes_on_its_edges() {
    let dir = work_dir("inspect-graph");
    let svg = dir.join("scaled-graph.svg");
    // ksc's own layout, whether Graphviz is installed or not.
    let args = ["jacobian", "ksc-examples/ad/vectors.ks", "scaled", "--graph", svg.to_str().unwrap()];
    let out = ksc_env(&args, &[("KSC_DOT", "")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = read(&svg);
    let doc = parse(&text);
    let labels = texts(doc.root_element(), "label");
    for combinator in ["lmVCatV", "build", "lmAdd", "lmCompose", "lmScale", "lmIndex", "lmGet$1$2", "lmGet$2$2"] {
        assert!(labels.iter().any(|l| l == combinator), "no node {combinator}: {labels:?}");
    }
    // The result, lmVCatV, is drawn once; an edge per argument map.
    assert_eq!(labels.iter().filter(|l| *l == "lmVCatV").count(), 1);
    let edges = doc.descendants().filter(|n| class_is(n, "edge")).count();
    assert_eq!(edges, labels.len() - 1, "a tree: {labels:?}");
    let shapes = texts(doc.root_element(), "shape");
    assert!(shapes.iter().any(|s| s == "((F, F[]) -o F)[]"), "a vector of maps: {shapes:?}");
    assert!(shapes.iter().any(|s| s == "F -o F"), "{shapes:?}");
}

/// With Graphviz, `--graph` is its drawing of ksc's DOT text (here a
/// script that prints its input stands in for `dot -Tsvg`: the file is the
/// DOT text).
#[test]
fn the_graph_goes_through_dot_when_there_is_one() {
    use std::os::unix::fs::PermissionsExt;
    let dir = work_dir("inspect-dot");
    let fake = dir.join("fake-dot");
    std::fs::write(&fake, "#!/bin/sh\ntest \"$1\" = -Tsvg && exec cat\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out_file = dir.join("scaled.dot");
    let args = ["jacobian", "ksc-examples/ad/vectors.ks", "scaled", "--graph", out_file.to_str().unwrap()];
    let out = ksc_env(&args, &[("KSC_DOT", fake.to_str().unwrap())]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dot = read(&out_file);
    assert!(dot.starts_with("digraph \"[D scaled]: 13 maps\" {"), "{dot}");
    assert!(dot.contains("[label=\"lmVCatV\", tooltip=\"(tuple a v)\"];"), "{dot}");
    assert!(
        dot.contains("[label=\"((F, F[]) -o F)[]\", tooltip=\"Vec of (Tuple Float (Vec Float)) -> Float\"];"),
        "{dot}"
    );
}

#[test]
fn the_html_page_has_the_source_both_jacobians_the_rules_and_the_pictures() {
    let dir = work_dir("inspect-html");
    let html = dir.join("f2.html");
    run(&["jacobian", "ksc-examples/ad/scalar.ks", "f2", "--html", html.to_str().unwrap()]);
    let text = read(&html);
    let doc = parse(&text);
    assert!(doc.root_element().has_tag_name(("http://www.w3.org/1999/xhtml", "html")));
    assert!(!text.contains("src=") && !text.contains("href="), "self-contained");
    let body = doc.root_element();
    assert!(texts(body, "source")[0].starts_with("(def f2 Float (x : Float)"), "{text}");
    assert!(texts(body, "raw")[0].contains("lmHCat"));
    assert!(texts(body, "simplified")[0].contains("(lmScale x"));
    // The rules in order, as --trace lists them, with their statements,
    // and the phases between them.
    let rules = texts(body, "name");
    let (hv, sc) =
        (rules.iter().position(|r| r == "compose-hcat-vcat"), rules.iter().position(|r| r == "compose-scales"));
    assert!(matches!((hv, sc), (Some(a), Some(b)) if a < b), "{rules:?}");
    let (_, stderr) = run(&["jacobian", "ksc-examples/ad/scalar.ks", "f2", "--trace"]);
    let traced = stderr.lines().filter(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit())).count();
    assert_eq!(rules.len(), traced, "{stderr}");
    assert!(texts(body, "law").iter().any(|l| l == "S(k1) ∘ S(k2) = S(k1 * k2)"));
    // Numbered as --trace numbers them.
    let scales = doc
        .descendants()
        .find(|n| class_is(n, "rule") && texts(*n, "name") == ["compose-scales"])
        .expect("compose-scales is listed");
    assert_eq!(scales.attribute("value"), Some("14"));
    let phases = texts(body, "phase");
    assert_eq!(phases.last().map(String::as_str), Some("after simplify-again: 10 nodes"), "{phases:?}");
    // The graph, inline; no matrix without --at.
    let graph = of_class(&doc, "graph");
    assert!(graph.descendants().any(|n| n.has_tag_name(("http://www.w3.org/2000/svg", "svg"))));
    assert!(!doc.descendants().any(|n| class_is(&n, "heatmap")));

    // With --at, the picture of --svg too.
    let html = dir.join("scaled.html");
    run(&["jacobian", "ksc-examples/ad/vectors.ks", "scaled", "--at", SCALED_AT, "--html", html.to_str().unwrap()]);
    let text = read(&html);
    let doc = parse(&text);
    assert_eq!(cells(of_class(&doc, "heatmap")), 5);
}

#[test]
fn trace_states_each_law_and_the_size_after_each_phase() {
    let (stdout, stderr) = run(&["jacobian", "ksc-examples/ad/scalar.ks", "f2", "--trace"]);
    assert!(stdout.contains("(lmScale x"), "{stdout}");
    assert!(stderr.starts_with("; simplifying [D f2] (53 nodes as derived): 16 rules fired\n"), "{stderr}");
    assert!(
        stderr.contains("  14. law compose-scales (in push-apply)\n      law:    S(k1) ∘ S(k2) = S(k1 * k2)\n"),
        "{stderr}"
    );
    assert!(stderr.contains("\n; after simplify: 10 nodes (14 rules so far)\n"), "{stderr}");
    assert!(
        stderr.ends_with(
            "; after simplify-again: 10 nodes (16 rules so far)\n;   its normalize of push-apply: 2 rewrites of its fuel of 100000\n"
        ),
        "{stderr}"
    );

    let (_, explained) = run(&["jacobian", "ksc-examples/ad/scalar.ks", "f2", "--explain", "compose-hcat-vcat"]);
    assert!(explained.starts_with("; compose-hcat-vcat fired 2 times of the 16 rules"), "{explained}");
    assert_eq!(explained.matches("law compose-hcat-vcat").count(), 2, "{explained}");
    assert!(!explained.contains("compose-scales"), "{explained}");
    let (_, none) = run(&["jacobian", "ksc-examples/ad/scalar.ks", "f2", "--explain", "transpose-one"]);
    assert!(none.starts_with("; transpose-one did not fire"), "{none}");
}

#[test]
fn bad_requests_are_clear_errors() {
    let dir = work_dir("inspect-bad");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--explain".into(), "no-such-rule".into()], "unknown rule `no-such-rule`; the rules are: "),
        (vec!["--svg".into(), dir.join("x.svg").display().to_string()], "--at"),
        (vec!["--graph".into(), "/nonexistent-dir/g.svg".into()], "cannot write `/nonexistent-dir/g.svg`"),
        (vec!["--html".into(), dir.display().to_string()], "cannot write"),
        (vec!["--graph".into(), "ksc-examples/ad/vectors.ks".into()], "is the input file"),
        (
            vec!["--at".into(), SCALED_AT.into(), "--svg".into(), "/nonexistent-dir/m.svg".into()],
            "cannot write `/nonexistent-dir/m.svg`",
        ),
    ];
    for (extra, message) in cases {
        let mut args = vec!["jacobian", "ksc-examples/ad/vectors.ks", "scaled"];
        args.extend(extra.iter().map(String::as_str));
        let out = ksc(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message) && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// The function of `file` to draw: the first that comes with a point
/// (`f$at`), at that point, else the last one defined, without (one per
/// file keeps the test's time to about 10 s of CPU).
fn function(file: &Path) -> (String, Option<String>) {
    let text = read(&root().join(file));
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("(def "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "main" && !n.ends_with("_data"))
        .collect();
    match names.iter().find(|n| n.ends_with("$at")) {
        Some(n) => (n.trim_end_matches("$at").to_string(), Some(format!("({n})"))),
        None => (names.last().expect("a function").to_string(), None),
    }
}

/// Every example of `ksc-examples/ad/` (one function of each, see
/// [`function`]), and ADBench's HT and BA: the pictures and the page are
/// made and well-formed.
#[test]
fn the_pictures_and_the_page_are_made_for_every_example() {
    let dir = work_dir("inspect-examples");
    let mut runs: Vec<(PathBuf, String, Option<String>)> = Vec::new();
    for file in ks_files("ksc-examples/ad") {
        let (f, at) = function(&file);
        runs.push((file, f, at));
    }
    let (ht, ba) = (PathBuf::from("ksc-examples/adbench/hand.ks"), PathBuf::from("ksc-examples/adbench/ba.ks"));
    runs.push((ht.clone(), "hand_objective".into(), None));
    runs.push((ba.clone(), "ba_objective".into(), None));
    runs.push((
        ba,
        "ba_residuals".into(),
        Some("(let (((c x w f ci pi) (ba_data 2 3 4))) (tuple (tuple c x w) f ci pi))".into()),
    ));
    let mut failures = Vec::new();
    for (k, (file, f, at)) in runs.iter().enumerate() {
        let (graph, html, svg) =
            (dir.join(format!("{k}-g.svg")), dir.join(format!("{k}.html")), dir.join(format!("{k}.svg")));
        let mut args = vec!["jacobian", file.to_str().unwrap(), f, "--graph", graph.to_str().unwrap()];
        args.extend(["--html", html.to_str().unwrap()]);
        if let Some(at) = at {
            args.extend(["--at", at, "--svg", svg.to_str().unwrap()]);
        }
        let out = ksc(&args);
        if !out.status.success() {
            failures.push(format!("ksc {}: {}\n{}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr)));
            continue;
        }
        let mut files = vec![&graph, &html];
        files.extend(at.as_ref().map(|_| &svg));
        for p in files {
            let text = read(p);
            if let Err(e) = try_parse(&text) {
                failures.push(format!("ksc {}: {} is not well-formed: {e}", args.join(" "), p.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} failed:\n{}", failures.len(), runs.len(), failures.join("\n"));
}

/// The picture of README's "Inspecting a Jacobian" is what its command
/// draws (re-bless with `KSC_BLESS=1` after changing the pictures).
#[test]
fn the_readme_picture_is_what_the_command_draws() {
    let readme = read(&root().join("README.md"));
    let at = readme.split("    AT='").nth(1).and_then(|s| s.split('\'').next()).expect("README sets AT");
    let dir = work_dir("inspect-readme");
    let svg = dir.join("gmm.svg");
    let args = ["jacobian", "ksc-examples/adbench/gmm.ks", "gmm_gradient", "--at", at, "--svg", svg.to_str().unwrap()];
    let command =
        "ksc jacobian ksc-examples/adbench/gmm.ks gmm_gradient --at \"$AT\" --svg docs/gmm-gradient-jacobian.svg";
    assert!(readme.contains(command), "README shows the command");
    run(&args);
    if let Some(m) = crate::common::expect_file(Path::new("docs/gmm-gradient-jacobian.svg"), &read(&svg)) {
        panic!("{m}");
    }
}
