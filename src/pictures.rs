//! The pictures of `ksc jacobian`: the Jacobian at a point as a heat map
//! beside its sparsity patterns (`--svg`), and the linear-map program as a
//! graph of combinators (`--graph`). Written with the `svg` crate's
//! document tree (which escapes text and attributes).

use std::path::Path;

use ksc_ir::{Body, Callee, Def, Expr, ExprId, Type};
use std::collections::HashMap;
use svg::node::element::{Group, Line, Rectangle, Text, Title};
use svg::Document;

use crate::matrix::Jacobian;

/// An SVG document of this size and title on a white background.
fn document(width: f64, height: f64, title: &str) -> Document {
    Document::new()
        .set("width", width)
        .set("height", height)
        .set("viewBox", (0, 0, width, height))
        .set("font-family", "sans-serif")
        .set("font-size", 11)
        .add(Title::new(title.to_string()))
        .add(Rectangle::new().set("width", "100%").set("height", "100%").set("fill", "white"))
}

/// The most cells a picture draws along a side: a larger matrix is drawn
/// in cells of several entries (as `--sparsity` draws text).
const CELLS: usize = 100;
/// The side of the square a picture's matrix fills, at most, in pixels.
const SIDE: usize = 360;
/// The most characters of a map's shape a graph writes (its tooltip has
/// all of it).
const SHAPE_CHARS: usize = 80;

/// The blocks along one side of the matrix: each a label and its first
/// row (column); they partition the side in order.
#[derive(Clone, Debug, Default)]
pub struct Blocks {
    pub labels: Vec<String>,
    pub starts: Vec<usize>,
}

impl Blocks {
    /// The blocks of a side of `n` entries whose entry labels are `labels`:
    /// one per run of labels with the same `block` (the label up to the
    /// first `[` or the second `.`: `v[2]` is in `v`, `p.1[0]` in `p.1`).
    pub fn of_labels(labels: &[String]) -> Blocks {
        let mut b = Blocks::default();
        for (i, l) in labels.iter().enumerate() {
            let name = block_of(l);
            if b.labels.last() != Some(&name) {
                b.labels.push(name);
                b.starts.push(i);
            }
        }
        b
    }

    fn ends(&self, n: usize) -> Vec<(usize, usize)> {
        (0..self.starts.len()).map(|k| (self.starts[k], self.starts.get(k + 1).copied().unwrap_or(n))).collect()
    }
}

/// The block an entry's label belongs to (see [`Blocks::of_labels`]).
fn block_of(label: &str) -> String {
    let head = label.split('[').next().unwrap_or(label);
    let mut parts = head.splitn(3, '.');
    match (parts.next(), parts.next()) {
        (Some(a), Some(b)) => format!("{a}.{b}"),
        (Some(a), None) => a.to_string(),
        _ => head.to_string(),
    }
}

/// The colour of `x` on a diverging scale over [-max, max]: blue below
/// zero, white at zero, red above.
fn colour(x: f64, max: f64) -> String {
    if !x.is_finite() {
        return "#000000".into();
    }
    let t = if max > 0.0 { (x / max).clamp(-1.0, 1.0) } else { 0.0 };
    let (r, g, b) = if t >= 0.0 { (178.0, 24.0, 43.0) } else { (33.0, 102.0, 172.0) };
    let a = t.abs();
    let mix = |c: f64| (255.0 * (1.0 - a) + c * a).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(r), mix(g), mix(b))
}

fn text(x: f64, y: f64, class: &str, content: &str) -> Text {
    Text::new(content).set("x", x).set("y", y).set("class", class)
}

/// The matrix drawn in cells: how many entries each cell covers, and the
/// grid's size in cells.
struct Grid {
    rows: usize,
    cols: usize,
    bh: usize,
    bw: usize,
    /// A cell's width and height in pixels: square unless one side has
    /// far fewer cells than the other (HT's 12 x 892 is not a line).
    pw: f64,
    ph: f64,
}

impl Grid {
    fn new(rows: usize, cols: usize) -> Grid {
        let (bh, bw) = (rows.div_ceil(CELLS).max(1), cols.div_ceil(CELLS).max(1));
        let (nr, nc) = (rows.div_ceil(bh).max(1), cols.div_ceil(bw).max(1));
        let px = |n: usize| (SIDE as f64 / n as f64).clamp(3.0, 24.0).floor();
        let square = px(nr.max(nc));
        let (pw, ph) = if nr * 4 < nc || nc * 4 < nr { (px(nc), px(nr)) } else { (square, square) };
        Grid { rows, cols, bh, bw, pw, ph }
    }

    fn cells(&self) -> (usize, usize) {
        (self.rows.div_ceil(self.bh), self.cols.div_ceil(self.bw))
    }

    /// The entries of cell (i, j).
    fn span(&self, i: usize, j: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        (i * self.bh..((i + 1) * self.bh).min(self.rows), j * self.bw..((j + 1) * self.bw).min(self.cols))
    }

    fn width(&self) -> f64 {
        self.cells().1 as f64 * self.pw
    }

    fn height(&self) -> f64 {
        self.cells().0 as f64 * self.ph
    }

    /// The position of row (column) boundary `k` in pixels.
    fn y(&self, k: usize) -> f64 {
        k as f64 / self.bh as f64 * self.ph
    }

    fn x(&self, k: usize) -> f64 {
        k as f64 / self.bw as f64 * self.pw
    }
}

/// The structural pattern of a Jacobian: which entries may be nonzero at
/// all, or why it is not known.
pub type Structural = Result<Pattern, String>;

/// Which entries of a matrix may be nonzero, row-major; what says so
/// (`[D f]`), and a note on how it was had.
pub struct Pattern {
    pub entries: Vec<bool>,
    pub source: String,
    pub note: Option<String>,
}

/// The picture of `--svg`: the Jacobian `j` at `point` as a heat map, its
/// structural pattern and its pattern at the point, with the blocks of the
/// rows and columns marked and labelled.
pub fn matrix_svg(j: &Jacobian, point: &str, structural: &Structural) -> Document {
    let point = &point.split_whitespace().collect::<Vec<_>>().join(" ");
    let (rows, cols) = (j.rows.len(), j.cols.len());
    let grid = Grid::new(rows, cols);
    let (row_blocks, col_blocks) = (Blocks::of_labels(&j.rows), Blocks::of_labels(&j.cols));
    let label_chars = |b: &Blocks| b.labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64;
    let left = 16.0 + 7.0 * label_chars(&row_blocks);
    let top = 48.0 + 5.0 * label_chars(&col_blocks).min(24.0);
    let gap = 40.0 + left;
    let panel_w = grid.width().max(160.0);
    let width = left + 3.0 * panel_w + 2.0 * gap + 20.0 + 4.0 * label_chars(&col_blocks);
    let height = top + grid.height() + 90.0;
    let max = j.data.iter().filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs()));
    let entry = |r: usize, c: usize| j.data[r * cols + c];
    let nonzeros = j.data.iter().filter(|x| **x != 0.0).count();

    let mut doc = document(width, height, &format!("Jacobian at {point}: {rows} x {cols}"));
    let cell_note = if grid.bh > 1 || grid.bw > 1 {
        format!("; each cell {} x {} entries (the largest |entry|; any nonzero)", grid.bh, grid.bw)
    } else {
        String::new()
    };
    let caption = format!("Jacobian at {}: {rows} x {cols}{cell_note}", cut(point, 100));
    doc = doc.add(text(8.0, 16.0, "caption", &caption));

    // The heat map.
    let mut heat = Group::new().set("class", "heatmap").set("transform", format!("translate({left},{top})"));
    let (nr, nc) = grid.cells();
    for i in 0..nr {
        for k in 0..nc {
            let (rs, cs) = grid.span(i, k);
            let x = rs.clone().flat_map(|r| cs.clone().map(move |c| (r, c))).map(|(r, c)| entry(r, c)).fold(
                0.0f64,
                |m, x| {
                    if x.abs() > m.abs() || x.is_nan() {
                        x
                    } else {
                        m
                    }
                },
            );
            if x == 0.0 {
                continue;
            }
            let mut cell = Rectangle::new()
                .set("class", "cell")
                .set("x", k as f64 * grid.pw)
                .set("y", i as f64 * grid.ph)
                .set("width", grid.pw)
                .set("height", grid.ph)
                .set("fill", colour(x, max));
            if grid.bh == 1 && grid.bw == 1 {
                cell = cell.add(Title::new(format!("{} / {} = {}", j.rows[i], j.cols[k], ksc_eval::format_float(x))));
            }
            heat = heat.add(cell);
        }
    }
    heat = frame(heat, &grid, &row_blocks, &col_blocks, "value at the point");
    doc = doc.add(heat);
    doc = doc.add(legend(left, top + grid.height() + 40.0, max));

    // The structural pattern.
    let x0 = left + panel_w + gap;
    let mut st = Group::new().set("class", "structural").set("transform", format!("translate({x0},{top})"));
    let mut missing = 0;
    match structural {
        Ok(p) => {
            let pattern = &p.entries;
            let count = pattern.iter().filter(|b| **b).count();
            st = pattern_cells(st, &grid, |r, c| pattern[r * cols + c], "#404040");
            let title = format!("structural ({}): {count} may be nonzero", p.source);
            st = frame(st, &grid, &row_blocks, &col_blocks, &title);
            let mut y = grid.height() + 32.0;
            for line in p.note.iter().flat_map(|n| wrap(n, (panel_w / 6.0) as usize)) {
                st = st.add(text(0.0, y, "note", &line).set("font-size", 9));
                y += 12.0;
            }
            missing = (0..rows * cols).filter(|&k| j.data[k] != 0.0 && !pattern[k]).count();
        }
        Err(why) => {
            st = frame(st, &grid, &row_blocks, &col_blocks, "structural pattern");
            let mut y = 20.0;
            for line in wrap(&format!("not available: {why}"), (panel_w / 6.0) as usize) {
                st = st.add(text(4.0, y, "note", &line));
                y += 14.0;
            }
        }
    }
    doc = doc.add(st);

    // The pattern at the point; an entry nonzero where the structural
    // pattern says it cannot be (a ksc bug) in red.
    let x1 = x0 + panel_w + gap;
    let mut num = Group::new().set("class", "numerical").set("transform", format!("translate({x1},{top})"));
    num = pattern_cells(num, &grid, |r, c| entry(r, c) != 0.0, "#404040");
    if let Ok(p) = structural {
        num = pattern_cells(num, &grid, |r, c| entry(r, c) != 0.0 && !p.entries[r * cols + c], "#e00000");
    }
    num = frame(num, &grid, &row_blocks, &col_blocks, &format!("at the point: {nonzeros} nonzero"));
    doc = doc.add(num);
    if missing > 0 {
        let note = format!("{missing} entries are nonzero outside the structural pattern (red): a ksc bug");
        doc = doc.add(text(x0, height - 12.0, "warning", &note).set("fill", "#e00000"));
    }
    doc
}

/// `g` with a cell drawn where any entry of it satisfies `on`.
fn pattern_cells(mut g: Group, grid: &Grid, on: impl Fn(usize, usize) -> bool, fill: &str) -> Group {
    let (nr, nc) = grid.cells();
    for i in 0..nr {
        for k in 0..nc {
            let (rs, cs) = grid.span(i, k);
            if rs.clone().any(|r| cs.clone().any(|c| on(r, c))) {
                g = g.add(
                    Rectangle::new()
                        .set("class", "cell")
                        .set("x", k as f64 * grid.pw)
                        .set("y", i as f64 * grid.ph)
                        .set("width", grid.pw)
                        .set("height", grid.ph)
                        .set("fill", fill),
                );
            }
        }
    }
    g
}

/// A panel's border, title, block lines and block labels.
fn frame(mut g: Group, grid: &Grid, rows: &Blocks, cols: &Blocks, title: &str) -> Group {
    let (w, h) = (grid.width(), grid.height());
    g = g.add(
        Rectangle::new()
            .set("class", "border")
            .set("width", w)
            .set("height", h)
            .set("fill", "none")
            .set("stroke", "#808080"),
    );
    let line = |x1: f64, y1: f64, x2: f64, y2: f64| {
        Line::new()
            .set("class", "block-line")
            .set("x1", x1)
            .set("y1", y1)
            .set("x2", x2)
            .set("y2", y2)
            .set("stroke", "#2a7d2a")
            .set("stroke-width", 1)
    };
    for (k, (a, b)) in rows.ends(grid.rows).into_iter().enumerate() {
        if a > 0 {
            g = g.add(line(0.0, grid.y(a), w, grid.y(a)));
        }
        let y = (grid.y(a) + grid.y(b)) / 2.0 + 4.0;
        g = g.add(text(-6.0, y, "block-label", &rows.labels[k]).set("text-anchor", "end"));
    }
    for (k, (a, b)) in cols.ends(grid.cols).into_iter().enumerate() {
        if a > 0 {
            g = g.add(line(grid.x(a), 0.0, grid.x(a), h));
        }
        let x = (grid.x(a) + grid.x(b)) / 2.0;
        g = g.add(text(x, -6.0, "block-label", &cols.labels[k]).set("transform", format!("rotate(-40 {x} -6)")));
    }
    g.add(text(0.0, h + 16.0, "panel-title", title).set("font-weight", "bold"))
}

/// The colour scale: 11 steps from -max to max, labelled at both ends and
/// at zero.
fn legend(x: f64, y: f64, max: f64) -> Group {
    let mut g = Group::new().set("class", "legend").set("transform", format!("translate({x},{y})"));
    for k in 0..=10 {
        let v = (k as f64 - 5.0) / 5.0 * max;
        g = g.add(
            Rectangle::new()
                .set("x", k as f64 * 14.0)
                .set("width", 14)
                .set("height", 10)
                .set("fill", colour(v, max))
                .set("stroke", "#c0c0c0")
                .set("stroke-width", 0.5),
        );
    }
    let label = |x: f64, s: String| text(x, 24.0, "legend-label", &s).set("text-anchor", "middle");
    g.add(label(7.0, format!("-{}", ksc_eval::format_float(max))))
        .add(label(77.0, "0".into()))
        .add(label(147.0, ksc_eval::format_float(max)))
}

/// `s` in lines of at most `width` characters (at spaces where it can).
fn wrap(s: &str, width: usize) -> Vec<String> {
    let width = width.max(10);
    let mut lines: Vec<String> = vec![String::new()];
    for word in s.split(' ') {
        let last = lines.last_mut().expect("one line at least");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines.into_iter().take(12).collect()
}

// ---------------------------------------------------------------------------
// The linear-map program as a graph.

/// A node of the graph: a combinator (or the other expression of a map
/// type that makes a map: `build`, `if`, a call), and the nodes whose
/// maps it takes, with their types.
#[derive(Debug)]
pub struct Node {
    pub label: String,
    /// The non-map arguments, printed (for the node's tooltip).
    pub detail: String,
    pub inputs: Vec<(usize, Type)>,
}

/// The graph of the linear maps of `d`'s body: a node per expression
/// that makes a map, an edge from each map to the node taking it (through
/// the `let`s that name it). The last node is the result.
pub fn lm_graph(d: &Def) -> Vec<Node> {
    let mut g = GraphBuilder { body: &d.body, nodes: Vec::new(), env: HashMap::new() };
    if g.visit(d.root).is_none() {
        let ty = d.body.ty(d.root).clone();
        g.nodes.push(Node { label: format!("{ty}"), detail: String::new(), inputs: Vec::new() });
    }
    g.nodes
}

struct GraphBuilder<'a> {
    body: &'a Body,
    nodes: Vec<Node>,
    /// The node of each `let`-bound map, by name (innermost last).
    env: HashMap<String, Vec<usize>>,
}

fn has_lm(t: &Type) -> bool {
    match t {
        Type::LM(..) => true,
        Type::Tuple(ts) => ts.iter().any(has_lm),
        Type::Tensor(_, t) | Type::Lam(_, t) => has_lm(t),
        _ => false,
    }
}

/// The shape a map's edge carries: `S -> T` for `LM S T`.
pub fn shape(t: &Type) -> String {
    match t {
        Type::LM(s, t) => format!("{s} -> {t}"),
        Type::Tensor(1, t) => format!("Vec of {}", shape(t)),
        Type::Tensor(n, t) => format!("Tensor {n} of {}", shape(t)),
        Type::Lam(_, t) => shape(t),
        Type::Tuple(ts) => format!("({})", ts.iter().map(shape).collect::<Vec<_>>().join(", ")),
        _ => t.to_string(),
    }
}

/// A type in few characters, for a graph's edges: `F` Float, `I`
/// Integer, `B` Bool, `S` String, `T[]` a vector of T (`T[,]` a matrix),
/// `(T, U)` a tuple, `S -o T` a linear map (`(S -o T)[]` a vector of them).
pub fn compact(t: &Type) -> String {
    match t {
        Type::Float => "F".into(),
        Type::Integer => "I".into(),
        Type::Bool => "B".into(),
        Type::String => "S".into(),
        Type::Tuple(ts) => format!("({})", ts.iter().map(compact).collect::<Vec<_>>().join(", ")),
        Type::Tensor(n, e) => {
            let e = match **e {
                Type::LM(..) => format!("({})", compact(e)),
                _ => compact(e),
            };
            format!("{e}[{}]", ",".repeat(n.saturating_sub(1)))
        }
        Type::Lam(_, t) => compact(t),
        Type::LM(s, t) => format!("{} -o {}", compact(s), compact(t)),
        Type::Unknown => "?".into(),
    }
}

/// At most `n` characters of `s`, with `...` if cut.
pub fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

impl GraphBuilder<'_> {
    /// The node making the map of `e` (if its type has one).
    fn visit(&mut self, e: ExprId) -> Option<usize> {
        let ty = self.body.ty(e).clone();
        match &self.body.exprs[e] {
            Expr::Var(v) => self.env.get(v).and_then(|ns| ns.last().copied()),
            Expr::Let(p, r, s) => {
                let bound = self.visit(*r);
                let vars = p.vars().to_vec();
                let single = vars.len() == 1;
                if let (Some(n), true) = (bound, single) {
                    self.env.entry(vars[0].clone()).or_default().push(n);
                }
                let out = self.visit(*s);
                if let (Some(_), true) = (bound, single) {
                    self.env.get_mut(&vars[0]).map(Vec::pop);
                }
                out
            }
            _ if !has_lm(&ty) => None,
            Expr::Call(c, arg) => {
                let label = match c {
                    Callee::Prim(p) => p.to_string(),
                    Callee::Fun(f) => f.short(),
                    #[allow(unreachable_patterns)]
                    other => format!("{other:?}"),
                };
                let (args, _) = ksc_ir::term::call_components(self.body, *arg);
                self.node(label, &args)
            }
            Expr::Lam(_, _, s) => {
                let s = *s;
                self.visit(s)
            }
            node => {
                let label = match node {
                    Expr::If(..) => "if".to_string(),
                    Expr::Tuple(_) => "tuple".to_string(),
                    _ => cut(&ksc_ir::print::print_expr(self.body, e), 24),
                };
                let kids: Vec<ExprId> = ksc_ir::term::children(node).into_iter().collect();
                self.node(label, &kids)
            }
        }
    }

    fn node(&mut self, label: String, args: &[ExprId]) -> Option<usize> {
        let mut inputs = Vec::new();
        let mut detail = Vec::new();
        for &a in args {
            let ty = self.body.ty(a).clone();
            if has_lm(&ty) {
                if let Some(n) = self.visit(a) {
                    inputs.push((n, ty));
                }
            } else {
                detail.push(cut(&ksc_ir::print::print_expr(self.body, a), 60));
            }
        }
        self.nodes.push(Node { label, detail: detail.join(" "), inputs });
        Some(self.nodes.len() - 1)
    }
}

/// The graph as Graphviz's DOT.
fn dot_text(nodes: &[Node], title: &str) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let mut out = format!("digraph {} {{\n  rankdir=BT;\n  node [shape=box, fontname=\"sans-serif\"];\n", q(title));
    for (k, n) in nodes.iter().enumerate() {
        out.push_str(&format!("  n{k} [label={}, tooltip={}];\n", q(&n.label), q(&n.detail)));
    }
    for (k, n) in nodes.iter().enumerate() {
        for (i, t) in &n.inputs {
            let (label, tip) = (q(&cut(&compact(t), SHAPE_CHARS)), q(&shape(t)));
            out.push_str(&format!("  n{i} -> n{k} [label={label}, tooltip={tip}];\n"));
        }
    }
    out.push_str("}\n");
    out
}

/// The graph drawn by ksc: in layers by the longest path from the result
/// (at the top), each layer centred; the shape of a node's map is written
/// where its edges leave it (an edge's tooltip has it in full).
pub fn graph_svg(nodes: &[Node], title: &str) -> Document {
    let n = nodes.len();
    // Layer: the longest path from the result (the last node); nodes not
    // reaching it (none, in a tree) go on layer 0.
    let mut layer = vec![0usize; n];
    for k in (0..n).rev() {
        for (i, _) in &nodes[k].inputs {
            layer[*i] = layer[*i].max(layer[k] + 1);
        }
    }
    let layers = layer.iter().copied().max().unwrap_or(0) + 1;
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); layers];
    for k in (0..n).rev() {
        rows[layer[k]].push(k);
    }
    // Each node's shape is written once, where its edges leave it (they all
    // carry the same map); its slot is as wide as the wider of the box and
    // the shape.
    let out_shape: Vec<Option<String>> = {
        let mut s = vec![None; n];
        for node in nodes {
            for (i, t) in &node.inputs {
                s[*i] = Some(cut(&compact(t), SHAPE_CHARS));
            }
        }
        s
    };
    let label_w = |k: usize| 16.0 + 7.0 * nodes[k].label.chars().count() as f64;
    let shape_w = |k: usize| out_shape[k].as_ref().map_or(0.0, |s| 5.5 * s.chars().count() as f64);
    let box_w = |k: usize| label_w(k).max(shape_w(k));
    let (h_gap, v_gap, box_h) = (24.0, 80.0, 26.0);
    let row_w = |r: &Vec<usize>| r.iter().map(|&k| box_w(k) + h_gap).sum::<f64>();
    let width = rows.iter().map(row_w).fold(0.0f64, f64::max).max(240.0) + 40.0;
    let height = layers as f64 * (box_h + v_gap) + 50.0;
    let mut pos = vec![(0.0f64, 0.0f64); n];
    for (l, r) in rows.iter().enumerate() {
        let mut x = (width - row_w(r)) / 2.0 + h_gap / 2.0;
        let y = 60.0 + l as f64 * (box_h + v_gap);
        for &k in r {
            pos[k] = (x + box_w(k) / 2.0, y);
            x += box_w(k) + h_gap;
        }
    }
    let mut doc = document(width, height, title).add(text(8.0, 16.0, "caption", title)).add(
        text(8.0, 30.0, "caption", "shapes: S -o T a linear map, F Float, I Integer, T[] a vector").set("font-size", 9),
    );
    for (k, node) in nodes.iter().enumerate() {
        for (i, t) in &node.inputs {
            let ((x1, y1), (x2, y2)) = (pos[*i], pos[k]);
            let (x2, y2) = (x2, y2 + box_h);
            doc = doc.add(
                Group::new()
                    .set("class", "edge")
                    .add(Title::new(format!("n{i} -> n{k}: {}", shape(t))))
                    .add(
                        Line::new()
                            .set("x1", x1)
                            .set("y1", y1 - 14.0)
                            .set("x2", x2)
                            .set("y2", y2)
                            .set("stroke", "#606060"),
                    )
                    .add(Rectangle::new().set("x", x2 - 2.5).set("y", y2).set("width", 5).set("height", 5)),
            );
        }
    }
    for (k, s) in out_shape.iter().enumerate() {
        if let Some(s) = s {
            let (x, y) = pos[k];
            doc = doc.add(
                text(x, y - 4.0, "shape", s).set("text-anchor", "middle").set("font-size", 9).set("fill", "#1f5fa0"),
            );
        }
    }
    for (k, node) in nodes.iter().enumerate() {
        let (x, y) = pos[k];
        let w = label_w(k);
        let tip = if node.detail.is_empty() { format!("n{k}") } else { format!("n{k}: {}", node.detail) };
        doc = doc.add(
            Group::new()
                .set("class", "node")
                .add(Title::new(tip))
                .add(
                    Rectangle::new()
                        .set("x", x - w / 2.0)
                        .set("y", y)
                        .set("width", w)
                        .set("height", box_h)
                        .set("rx", 4)
                        .set("fill", if k + 1 == n { "#fde9c9" } else { "#eef3fb" })
                        .set("stroke", "#404040"),
                )
                .add(text(x, y + 17.0, "label", &node.label).set("text-anchor", "middle")),
        );
    }
    doc
}

/// The environment variable naming the Graphviz program `--graph` runs
/// (default `dot`); empty, ksc lays the graph out itself.
pub const DOT_VAR: &str = "KSC_DOT";

/// Writes the graph of `d` to `path` as SVG: drawn by Graphviz's `dot`
/// (or `$KSC_DOT`) when it runs, else by [`graph_svg`].
pub fn write_graph(d: &Def, path: &Path) -> Result<(), String> {
    let nodes = lm_graph(d);
    let title = maps_title(&d.name.short(), nodes.len());
    if let Some(svg) = run_dot(&dot_text(&nodes, &title)) {
        return std::fs::write(path, svg).map_err(|e| format!("cannot write `{}`: {e}", path.display()));
    }
    save(&graph_svg(&nodes, &title), path)
}

/// A graph's title: `[D f]: 3 maps`.
pub fn maps_title(name: &str, n: usize) -> String {
    format!("{name}: {n} {}", if n == 1 { "map" } else { "maps" })
}

/// `dot -Tsvg` of `text`, or None if `dot` cannot be run or fails.
fn run_dot(text: &str) -> Option<Vec<u8>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let program = std::env::var_os(DOT_VAR).unwrap_or_else(|| "dot".into());
    if program.is_empty() {
        return None;
    }
    let mut child = Command::new(program)
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(text.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    (out.status.success() && !out.stdout.is_empty()).then_some(out.stdout)
}

/// Writes a document to `path`.
pub fn save(doc: &Document, path: &Path) -> Result<(), String> {
    svg::save(path, doc).map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_follow_the_labels() {
        let labels: Vec<String> =
            ["a", "v[0]", "v[1]", "p.1", "p.2[0]", "p.2[1]"].iter().map(|s| s.to_string()).collect();
        let b = Blocks::of_labels(&labels);
        assert_eq!(b.labels, ["a", "v", "p.1", "p.2"]);
        assert_eq!(b.starts, [0, 1, 3, 4]);
    }

    #[test]
    fn the_colour_scale_is_white_at_zero() {
        assert_eq!(colour(0.0, 2.0), "#ffffff");
        assert_eq!(colour(2.0, 2.0), "#b2182b");
        assert_eq!(colour(-2.0, 2.0), "#2166ac");
    }
}
