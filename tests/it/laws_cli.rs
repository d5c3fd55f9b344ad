//! `ksc laws` checks every law of the table and prints one row per law.

use crate::common::ksc;

#[test]
fn ksc_laws_prints_a_row_per_law_and_passes() {
    let out = ksc(&["laws", "--cases", "40", "--seed", "7"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for law in ksc_linmap::LAWS {
        let row = stdout.lines().find(|l| l.split_whitespace().next() == Some(law.name));
        let row = row.unwrap_or_else(|| panic!("no row for {}:\n{stdout}", law.name));
        assert!(row.contains(" ok ") && row.contains("40 cases"), "{row}");
    }
    assert!(stdout.contains("transpose-adjoint"));
    assert!(stdout.contains(&format!("{} laws checked, 0 failed", ksc_linmap::LAWS.len() + 1)), "{stdout}");
}

#[test]
fn ksc_laws_rejects_an_unknown_law() {
    let out = ksc(&["laws", "--law", "no-such-law"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no law matches"));
}

#[test]
fn ksc_laws_rejects_zero_cases() {
    // `--cases 0` checked nothing and called every law "ok".
    let out = ksc(&["laws", "--cases", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("at least one case"), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn help_documents_the_exit_codes() {
    let out = ksc(&["--help"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Exit codes:") && stdout.contains("2  usage error"), "{stdout}");
}
