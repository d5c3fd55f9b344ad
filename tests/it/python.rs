//! The Python package (`python/`): `pip install ./python` into a virtual
//! environment, as a user installs it (maturin builds the native module
//! with cargo), then its tests (`python/tests/test_*.py`, pytest) on the
//! installed package.
//!
//! The environment lives in the target directory (`target/tmp/
//! ksc-python-venv`, made when missing, with NumPy, SciPy, pytest and
//! maturin from the package index); the package is installed into it
//! afresh on every run. maturin builds in this test build's target
//! directory, with the same settings, so it compiles only PyO3 and the
//! module itself (`cargo test` does not build the module: nothing it tests
//! links it). The C caches the tests fill are in a temporary directory, removed
//! afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::root;

/// Fails the test, with the command's output, unless it succeeded.
fn succeeded(out: std::io::Result<std::process::Output>, what: &str) {
    let out = out.unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The virtual environment, with what the tests and the build need.
fn environment(tmp: &Path) -> PathBuf {
    let venv = tmp.join("ksc-python-venv");
    let python = venv.join("bin").join("python");
    let ready = python.exists()
        && Command::new(&python)
            .args(["-c", "import numpy, pytest, scipy, maturin"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ready {
        let _ = std::fs::remove_dir_all(&venv);
        succeeded(Command::new("python3").args(["-m", "venv"]).arg(&venv).output(), "python3 -m venv");
        succeeded(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
                .args(["numpy", "pytest", "scipy", "maturin>=1.9.4,<2"])
                .output(),
            "pip install numpy pytest scipy maturin",
        );
    }
    venv
}

#[test]
fn python_package() {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp.parent().expect("CARGO_TARGET_TMPDIR is <target>/tmp").to_path_buf();
    let venv = environment(&tmp);
    let python = venv.join("bin").join("python");
    let bin = venv.join("bin");
    let path = std::env::join_paths(
        std::iter::once(bin.clone()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();

    // The package, built and installed as `pip install ./python` does
    // (maturin found on PATH, already in the environment: no download).
    let _ = Command::new(&python).args(["-m", "pip", "uninstall", "--yes", "--quiet", "ksc"]).output();
    // The dev profile's settings are the test profile's (the workspace's
    // Cargo.toml), and the feature makes the compiler's crates' features
    // those of the test build: maturin compiles PyO3 and the module only.
    let profile = if cfg!(debug_assertions) { "dev" } else { "release" };
    succeeded(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-build-isolation"])
            .arg(root().join("python"))
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", &target)
            .env("MATURIN_PEP517_ARGS", format!("--profile {profile} --features shared-test-build"))
            .output(),
        "pip install ./python",
    );

    // pytest from a directory of its own: `import ksc` is the installed
    // package, not the sources in python/.
    let run_dir = tmp.join("ksc-python-run");
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&run_dir).unwrap();
    let cache = std::env::temp_dir().join(format!("ksc-python-tests-{}", std::process::id()));
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error::pytest.PytestUnraisableExceptionWarning"])
        .arg(root().join("python").join("tests"))
        .current_dir(&run_dir)
        .env("PATH", &path)
        .env_remove("PYTHONPATH")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("KSC_CACHE_DIR", &cache)
        // Unoptimised C: these tests check values, not speed.
        .env("KSC_CFLAGS", "-O0")
        .output();
    let _ = std::fs::remove_dir_all(&cache);
    succeeded(out, "pytest");
}
