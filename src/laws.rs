//! `ksc laws`: property-checks every linear-map law of the optimiser's table
//! against the dense-matrix semantics and prints one row per law.

use std::process::ExitCode;

use ksc_linmap::check::{check_law, check_transposes, LawReport};
use ksc_linmap::LAWS;

/// Options of `ksc laws`.
#[derive(clap::Args)]
pub struct LawsArgs {
    /// Random instances checked per law (at least 1).
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    cases: usize,
    /// Check only the laws whose name contains this text (e.g.
    /// `transpose`); `transpose-adjoint` is the adjoint property of every
    /// combinator.
    #[arg(long)]
    law: Option<String>,
    /// Seed of the random generator; the same seed checks the same instances.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// `--cases`: a count of at least one (no law is "ok" unchecked).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("at least one case per law is needed; 0 would check nothing".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

pub fn run(args: &LawsArgs) -> ExitCode {
    let selected = |name: &str| args.law.as_ref().is_none_or(|l| name.contains(l.as_str()));
    let mut reports: Vec<LawReport> = Vec::new();
    let mut width = 0;
    for (i, law) in LAWS.iter().enumerate().filter(|(_, l)| selected(l.name)) {
        let r = check_law(law, args.cases, args.seed.wrapping_add(i as u64));
        width = width.max(r.name.len());
        print_row(&r, 28);
        reports.push(r);
    }
    if selected("transpose-adjoint") {
        let r = check_transposes(args.cases, args.seed);
        print_row(&r, 28);
        reports.push(r);
    }
    if reports.is_empty() {
        eprintln!(
            "error: no law matches `{}`; the laws are: {}",
            args.law.as_deref().unwrap_or(""),
            LAWS.iter().map(|l| l.name).collect::<Vec<_>>().join(", ")
        );
        return ExitCode::from(2);
    }
    let failed: Vec<&LawReport> = reports.iter().filter(|r| r.failure.is_some()).collect();
    for r in &failed {
        if let Some(c) = &r.failure {
            println!("\nlaw {} ({}) fails; shrunk counterexample:\n{c}", r.name, r.statement);
        }
    }
    let total: std::time::Duration = reports.iter().map(|r| r.elapsed).sum();
    println!(
        "\n{} laws checked, {} failed, {} cases each, seed {}, {:.2}s",
        reports.len(),
        failed.len(),
        args.cases,
        args.seed,
        total.as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_row(r: &LawReport, width: usize) {
    let status = if r.failure.is_some() { "FAILED" } else { "ok" };
    println!(
        "{:<width$} {:<6} {:>6} cases {:>8.1} ms   {}",
        r.name,
        status,
        r.passed,
        r.elapsed.as_secs_f64() * 1000.0,
        r.statement,
        width = width
    );
}
