//! Runs the Python package's tests (`tests/test_*.py`, pytest) on the
//! native module this build made: the module and the package's Python
//! files are put together in a fresh directory, and pytest runs in a
//! virtual environment (under the target directory, made once, with NumPy,
//! pytest and SciPy, for sparse Jacobians and the GMM example, from the
//! package index). The C caches the tests fill are in
//! a temporary directory, removed afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target directory's profile folder (`target/debug`): this test runs
/// from `target/debug/deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

fn run(cmd: &mut Command, what: &str) {
    succeeded(cmd.output(), what);
}

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

#[test]
fn python_package() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let profile = profile_dir();
    // `cargo test` builds the module (the library's cdylib) into deps/;
    // `cargo build` also copies it up, where an older one may be left.
    let module = ["deps/lib_native.so", "lib_native.so"]
        .iter()
        .map(|p| profile.join(p))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("the native module lib_native.so is not in {}", profile.display()));

    // The package: its Python files and the module, as maturin lays it out.
    let stage = profile.join("ksc-python-package");
    let _ = std::fs::remove_dir_all(&stage);
    let package = stage.join("ksc");
    std::fs::create_dir_all(&package).unwrap();
    for entry in std::fs::read_dir(manifest.join("ksc")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "py") {
            std::fs::copy(&p, package.join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(&module, package.join("_native.abi3.so")).unwrap();

    // The environment, kept between runs.
    let venv = profile.join("ksc-python-venv");
    let python = venv.join("bin").join("python");
    let ready = python.exists()
        && Command::new(&python).args(["-c", "import numpy, pytest, scipy"]).output().is_ok_and(|o| o.status.success());
    if !ready {
        let _ = std::fs::remove_dir_all(&venv);
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv), "python3 -m venv");
        run(
            Command::new(&python).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "numpy",
                "pytest",
                "scipy",
            ]),
            "pip install numpy pytest scipy",
        );
    }

    let cache = std::env::temp_dir().join(format!("ksc-python-tests-{}", std::process::id()));
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error::pytest.PytestUnraisableExceptionWarning"])
        .arg(manifest.join("tests"))
        // From the package's directory: `python -m` puts the working
        // directory first on the path, and there `ksc` is the package
        // with its module, not the sources.
        .current_dir(&stage)
        .env("PYTHONPATH", &stage)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("KSC_CACHE_DIR", &cache)
        // Unoptimised C: these tests check values, not speed.
        .env("KSC_CFLAGS", "-O0")
        .output();
    let _ = std::fs::remove_dir_all(&cache);
    succeeded(out, "pytest");
}
