//! The ablations (`--ablate`) name rules that exist, each once. Their
//! passes are checked by the command line, which knows both pipelines
//! (`tests/it/passes.rs` runs every ablation).

use ksc_opt::ablation::ABLATIONS;

#[test]
fn every_rule_of_an_ablation_is_a_core_rule_once() {
    for a in ABLATIONS {
        for (i, r) in a.rules.iter().enumerate() {
            assert!(ksc_opt::core_rule(r).is_some(), "ablation {}: no Core rule `{r}`", a.name);
            assert!(!a.rules[..i].contains(r), "ablation {}: `{r}` twice", a.name);
        }
    }
}
