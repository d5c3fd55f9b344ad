//! The built-in prelude checks cleanly and declares exactly the built-ins.

use ksc_ir::{Decl, FunName, Type};
use ksc_types::{builtin_prelude, prelude_diagnostics, Diagnostic};

#[test]
fn prelude_checks_cleanly() {
    assert_eq!(prelude_diagnostics(), &[] as &[Diagnostic]);
    let (file, table) = builtin_prelude();
    assert!(table.get(&FunName::typed("add", Type::Tuple(vec![Type::Float, Type::Float]))).is_some());
    // Checked once per process: every call gives the same file and table.
    let (file2, table2) = builtin_prelude();
    assert!(std::ptr::eq(table, table2) && std::ptr::eq(file, file2));
}

/// The prelude's `edef`s are exactly the built-ins every backend
/// implements (`ksc_ir::builtin::TABLE`), with their result types.
#[test]
fn the_prelude_declares_exactly_the_builtins() {
    let (file, table) = builtin_prelude();
    let edefs: Vec<&ksc_ir::Edef> =
        file.decls.iter().filter_map(|d| if let Decl::Edef(e) = d { Some(e) } else { None }).collect();
    for e in &edefs {
        let name = e.name.with_base_ty(Some(e.arg_ty.clone()));
        assert!(ksc_ir::Builtin::resolve(&name).is_some(), "the prelude's `{name}` is not a Builtin");
    }
    for &(b, _, _) in ksc_ir::builtin::TABLE {
        assert!(table.get(&b.name()).is_some(), "{b:?} is not declared by the prelude");
    }
    assert_eq!(edefs.len(), ksc_ir::builtin::TABLE.len());
}
