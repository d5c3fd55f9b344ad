//! `ksc watch`: rebuilds on save, says what it recompiled, reruns `main`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// `ksc watch --run` of `path` for two builds, and the lines it prints.
fn watch_twice(path: &std::path::Path) -> (Child, impl Iterator<Item = String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ksc"))
        .args(["watch", "--run", "--poll", "20", "--builds", "2"])
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines().map(Result::unwrap);
    (child, lines)
}

#[test]
fn watch_recompiles_the_edited_definition_and_reruns_main() {
    let dir = crate::common::work_dir("watch");
    let path = dir.join("w.ks");
    let program = "(def f Float (x : Float) (mul x 2.0))\n\
                   (def g Float (x : Float) (add x 1.0))\n\
                   (gdef rev [f Float])\n\
                   (def main Integer () (let (u (print (f 1.0) \"\\n\")) 0))\n";
    std::fs::write(&path, program).unwrap();
    let (mut child, mut lines) = watch_twice(&path);
    let first: Vec<String> = lines.by_ref().take_while(|l| !l.starts_with("[watch] ran")).collect();
    assert!(first.iter().any(|l| l == "2"), "{first:#?}");
    assert!(first.iter().any(|l| l.contains("checked: def f, def g, gdef rev [f Float], def main")), "{first:#?}");
    // Some file systems keep modification times to the second: make sure the
    // edit is seen as one.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(&path, program.replace("(mul x 2.0)", "(mul x 3.0)")).unwrap();
    let second: Vec<String> = lines.collect();
    let status = child.wait().unwrap();
    assert!(status.success());
    assert!(second[0].starts_with("[watch] ") && second[0].contains(" compiled in "), "{second:#?}");
    assert!(second.iter().any(|l| l == "[watch]   checked: def f"), "{second:#?}");
    assert!(second.iter().any(|l| l == "[watch]   gdef_derived: gdef rev [f Float]"), "{second:#?}");
    // `main` inlines `f`: it is lowered again, and the C made again.
    assert!(second.iter().any(|l| l == "[watch]   loop_unit: [main (Tuple)]"), "{second:#?}");
    assert!(second.iter().any(|l| l == "[watch]   c_unit"), "{second:#?}");
    assert!(!second.iter().any(|l| l.contains("def g")), "g is not recompiled: {second:#?}");
    assert!(second.iter().any(|l| l == "3"), "{second:#?}");
    assert!(second.last().unwrap().starts_with("[watch] ran `main`"), "{second:#?}");
}

#[test]
fn watch_stops_a_main_that_never_ends_when_the_file_changes() {
    let dir = crate::common::work_dir("watch_loop");
    let path = dir.join("spin.ks");
    // `main` runs (practically) forever.
    std::fs::write(
        &path,
        "(def main Integer () (let (u (print (sumbuild 1000000000000 (lam (i : Integer) 1.0)) \"\\n\")) 0))\n",
    )
    .unwrap();
    let (mut child, mut lines) = watch_twice(&path);
    let first = lines.next().unwrap();
    assert!(first.contains(" compiled in "), "{first}");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(&path, "(def main Integer () (let (u (print \"done\\n\")) 0))\n").unwrap();
    // The watcher must go on: without a deadline a hung watcher hangs the
    // test. The deadline only tells a hang from a slow machine: the rebuild
    // takes about a second.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rest: Vec<String> = lines.collect();
        let _ = tx.send(rest);
    });
    let rest = match rx.recv_timeout(std::time::Duration::from_secs(300)) {
        Ok(rest) => rest,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the watcher did not rebuild after the edit: it hangs in a `main` that never ends");
        }
    };
    let status = child.wait().unwrap();
    assert!(status.success());
    assert!(rest.iter().any(|l| l.starts_with("[watch] stopped `main`")), "{rest:#?}");
    assert!(rest.iter().any(|l| l == "done"), "{rest:#?}");
    assert!(rest.last().unwrap().starts_with("[watch] ran `main`"), "{rest:#?}");
}
