//! `ksc jacobian --at`: the dense Jacobian at a point, for people (rows and
//! columns labelled by the component of the result and of the argument
//! they belong to, aligned; large matrices summarised) and for other tools
//! (`--format csv|json|npy`).

use std::io::Write;

use clap::ValueEnum;
use ksc_eval::Value;

/// How `--at` prints the matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Labelled and aligned; a summary (nonzeros, norms, the largest
    /// entries) when it has more than 64 rows or lines wider than 160
    /// characters.
    #[default]
    Text,
    /// Comma-separated, a header row of column labels, a label per row.
    Csv,
    /// `{"rows": [labels], "columns": [labels], "data": [[row], ...]}`.
    Json,
    /// NumPy's `.npy` (little-endian f64, C order), to redirect to a file.
    Npy,
}

/// The most rows, and characters per line, printed in full as text.
const TEXT_ROWS: usize = 64;
const TEXT_WIDTH: usize = 160;
/// The largest entries a summary lists.
const LARGEST: usize = 10;

/// A Jacobian at a point: `rows x cols` entries, row-major, and the labels
/// of its rows (the result's Floats) and columns (the argument's).
pub struct Jacobian {
    pub rows: Vec<String>,
    pub cols: Vec<String>,
    pub data: Vec<f64>,
}

/// The labels of the Floats of `v` in the order of `$tangentFlatten`
/// (depth first, tuple components left to right, tensors row-major;
/// Integers, Bools and Strings have none): `name`, `name.2` (the second
/// component of a tuple, counted from 1 as `get$2$n` does), `name[3]`,
/// `name[1,2]`.
pub fn float_labels(v: &Value, name: &str, out: &mut Vec<String>) {
    match v {
        Value::Float(_) => out.push(name.to_string()),
        Value::Tuple(vs) => {
            for (i, c) in vs.iter().enumerate() {
                float_labels(c, &format!("{name}.{}", i + 1), out);
            }
        }
        Value::Tensor(t) => {
            for (k, e) in t.data.iter().enumerate() {
                // The index of flat element k, row-major.
                let mut idx = vec![0; t.shape.len()];
                let mut rest = k;
                for (d, n) in t.shape.iter().enumerate().rev() {
                    idx[d] = rest % n.max(&1);
                    rest /= n.max(&1);
                }
                let idx: Vec<String> = idx.iter().map(usize::to_string).collect();
                float_labels(e, &format!("{name}[{}]", idx.join(",")), out);
            }
        }
        Value::Sparse(_) => float_labels(&v.dense(), name, out),
        _ => {}
    }
}

/// The labels of the argument's Floats: by parameter name, the argument
/// being the tuple of the parameters when there are several.
pub fn argument_labels(params: &[ksc_ir::Param], arg: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match (params, arg) {
        ([p], _) => float_labels(arg, &p.name, &mut out),
        (ps, Value::Tuple(vs)) if ps.len() == vs.len() => {
            for (p, v) in ps.iter().zip(vs.iter()) {
                float_labels(v, &p.name, &mut out);
            }
        }
        _ => float_labels(arg, "x", &mut out),
    }
    out
}

impl Jacobian {
    fn entry(&self, r: usize, c: usize) -> f64 {
        self.data[r * self.cols.len() + c]
    }

    /// Writes the matrix in `format` to `out`.
    pub fn write(&self, format: Format, out: &mut dyn Write) -> std::io::Result<()> {
        match format {
            Format::Text => match self.table() {
                Some(lines) => lines.iter().try_for_each(|l| writeln!(out, "{l}")),
                None => self.summary(out),
            },
            Format::Csv => self.csv(out),
            Format::Json => self.json(out),
            Format::Npy => self.npy(out),
        }
    }

    /// Labelled columns, right-aligned numbers in the original's format;
    /// `None` if that would not fit [`TEXT_ROWS`] and [`TEXT_WIDTH`].
    fn table(&self) -> Option<Vec<String>> {
        if self.rows.len() > TEXT_ROWS {
            return None;
        }
        let cells: Vec<Vec<String>> = (0..self.rows.len())
            .map(|r| (0..self.cols.len()).map(|c| ksc_eval::format_float(self.entry(r, c))).collect())
            .collect();
        let label_width = self.rows.iter().map(|l| l.chars().count()).max().unwrap_or(0);
        let widths: Vec<usize> = (0..self.cols.len())
            .map(|c| cells.iter().map(|row| row[c].len()).chain([self.cols[c].chars().count()]).max().unwrap_or(0))
            .collect();
        if label_width + widths.iter().map(|w| w + 2).sum::<usize>() > TEXT_WIDTH {
            return None;
        }
        let mut header = format!("{:label_width$}", "");
        for (c, w) in widths.iter().enumerate() {
            header.push_str(&format!("  {:>w$}", self.cols[c]));
        }
        let mut lines = vec![header.trim_end().to_string()];
        for (r, row) in cells.iter().enumerate() {
            let mut line = format!("{:label_width$}", self.rows[r]);
            for (c, w) in widths.iter().enumerate() {
                line.push_str(&format!("  {:>w$}", row[c]));
            }
            lines.push(line);
        }
        Some(lines)
    }

    /// Nonzeros, norms and the largest entries with their labels.
    fn summary(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let n = self.data.len();
        let nonzeros = self.data.iter().filter(|x| **x != 0.0).count();
        let frobenius = self.data.iter().map(|x| x * x).sum::<f64>().sqrt();
        let max_abs = self.data.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let percent = if n == 0 { 0.0 } else { 100.0 * nonzeros as f64 / n as f64 };
        writeln!(
            out,
            "; too large to print: {} nonzeros of {n} ({percent:.1}%), Frobenius norm {}, largest |entry| {}",
            nonzeros,
            ksc_eval::format_float(frobenius),
            ksc_eval::format_float(max_abs)
        )?;
        writeln!(out, "; all entries: --format csv, json or npy; the pattern: --sparsity")?;
        let mut order: Vec<usize> = (0..n).filter(|&k| self.data[k] != 0.0).collect();
        order.sort_by(|&a, &b| self.data[b].abs().total_cmp(&self.data[a].abs()).then(a.cmp(&b)));
        let cols = self.cols.len();
        for &k in order.iter().take(LARGEST) {
            writeln!(
                out,
                "{} / {} = {}",
                self.rows[k / cols],
                self.cols[k % cols],
                ksc_eval::format_float(self.data[k])
            )?;
        }
        Ok(())
    }

    fn csv(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        let header: Vec<String> = std::iter::once(String::new()).chain(self.cols.iter().map(|c| quote(c))).collect();
        writeln!(out, "{}", header.join(","))?;
        for (r, label) in self.rows.iter().enumerate() {
            let row: Vec<String> = (0..self.cols.len()).map(|c| repr(self.entry(r, c))).collect();
            writeln!(out, "{},{}", quote(label), row.join(","))?;
        }
        Ok(())
    }

    fn json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let strings = |xs: &[String]| xs.iter().map(|s| json_string(s)).collect::<Vec<_>>().join(", ");
        writeln!(out, "{{")?;
        writeln!(out, "  \"rows\": [{}],", strings(&self.rows))?;
        writeln!(out, "  \"columns\": [{}],", strings(&self.cols))?;
        writeln!(out, "  \"data\": [")?;
        let cols = self.cols.len();
        for r in 0..self.rows.len() {
            // JSON has no NaN or infinity: they are null.
            let row: Vec<String> = (0..cols)
                .map(|c| self.entry(r, c))
                .map(|x| if x.is_finite() { repr(x) } else { "null".to_string() })
                .collect();
            let comma = if r + 1 < self.rows.len() { "," } else { "" };
            writeln!(out, "    [{}]{comma}", row.join(", "))?;
        }
        writeln!(out, "  ]")?;
        writeln!(out, "}}")
    }

    /// NumPy's format 1.0: magic, version, a header dict padded with spaces
    /// to a multiple of 64 bytes and ended by a newline, then the data.
    fn npy(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let dict = format!(
            "{{'descr': '<f8', 'fortran_order': False, 'shape': ({}, {}), }}",
            self.rows.len(),
            self.cols.len()
        );
        let unpadded = 10 + dict.len() + 1;
        let header = format!("{dict}{}\n", " ".repeat(unpadded.next_multiple_of(64) - unpadded));
        out.write_all(b"\x93NUMPY\x01\x00")?;
        out.write_all(&(header.len() as u16).to_le_bytes())?;
        out.write_all(header.as_bytes())?;
        for x in &self.data {
            out.write_all(&x.to_le_bytes())?;
        }
        Ok(())
    }
}

/// A Float exactly, in the shortest form that reads back as the same f64.
fn repr(x: f64) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{x:?}")
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jacobian() -> Jacobian {
        Jacobian {
            rows: vec!["y".into(), "y[1]".into()],
            cols: vec!["a".into(), "v[0]".into()],
            data: vec![1.0, -2.5, 0.0, 1e-3],
        }
    }

    fn text(j: &Jacobian, f: Format) -> String {
        let mut out = Vec::new();
        j.write(f, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_small_matrix_is_labelled_and_aligned() {
        assert_eq!(text(&jacobian(), Format::Text), "      a   v[0]\ny     1   -2.5\ny[1]  0  0.001\n");
    }

    #[test]
    fn csv_and_json_carry_labels_and_exact_values() {
        assert_eq!(text(&jacobian(), Format::Csv), ",\"a\",\"v[0]\"\n\"y\",1.0,-2.5\n\"y[1]\",0.0,0.001\n");
        let json = text(&jacobian(), Format::Json);
        assert!(json.contains("\"columns\": [\"a\", \"v[0]\"]") && json.contains("[0.0, 0.001]"), "{json}");
    }

    #[test]
    fn npy_has_numpys_header_and_the_data_in_c_order() {
        let mut out = Vec::new();
        jacobian().write(Format::Npy, &mut out).unwrap();
        assert_eq!(&out[..8], b"\x93NUMPY\x01\x00");
        let len = u16::from_le_bytes([out[8], out[9]]) as usize;
        assert_eq!((10 + len) % 64, 0);
        let header = std::str::from_utf8(&out[10..10 + len]).unwrap();
        assert!(header.contains("'shape': (2, 2)") && header.ends_with('\n'), "{header}");
        let data: Vec<f64> = out[10 + len..].chunks(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(data, [1.0, -2.5, 0.0, 1e-3]);
    }

    #[test]
    fn a_large_matrix_is_summarised_with_its_largest_entries() {
        let (r, c) = (70, 20);
        let data: Vec<f64> = (0..r * c).map(|k| if k % 7 == 0 { k as f64 } else { 0.0 }).collect();
        let j = Jacobian {
            rows: (0..r).map(|i| format!("y[{i}]")).collect(),
            cols: (0..c).map(|i| format!("x[{i}]")).collect(),
            data,
        };
        let s = text(&j, Format::Text);
        assert!(s.starts_with("; too large to print: 199 nonzeros of 1400 (14.2%)"), "{s}");
        // The largest is element 1393 = row 69, column 13.
        assert_eq!(s.lines().nth(2), Some("y[69] / x[13] = 1393"), "{s}");
        assert_eq!(s.lines().count(), 2 + LARGEST);
    }

    #[test]
    fn labels_follow_the_tangent_order() {
        use ksc_eval::Tensor;
        let m =
            Value::Tensor(Tensor { shape: vec![2, 2], data: (0..4).map(|i| Value::Float(i as f64)).collect() }.into());
        let v = Value::Tuple(vec![Value::Float(1.0), Value::Integer(3), m].into());
        let mut out = Vec::new();
        float_labels(&v, "p", &mut out);
        assert_eq!(out, ["p.1", "p.3[0,0]", "p.3[0,1]", "p.3[1,0]", "p.3[1,1]"]);
    }
}
