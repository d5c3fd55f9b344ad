//! The pipeline's pass names (a unit test of `pipeline/mod.rs` before; the
//! crate's lib has `test = false`, see Cargo.toml).

/// The names the command line selects passes by, in the order they
/// first run: renaming or adding a pass changes what users type.
#[test]
fn the_pipeline_names_its_passes_in_order() {
    assert_eq!(
        ksc_opt::pipeline::names(),
        [
            "simplify",
            "share-loop-values",
            "mark-paired-calls",
            "inline-paired",
            "scan-extras",
            "fuse-scan-extras",
            "mark-calls-in-loops",
            "hoist-loop-invariants",
            "hoist-inner-invariants"
        ]
    );
}
