//! What the rewrite engine knows about the program's global functions: their
//! definitions (for inlining), whether calling one may have an effect
//! (`print`, `$trace`, directly or through callees), whether it is
//! recursive, and whether a name is a built-in of the native prelude (for
//! constant folding, which must not fold a user's replacement of `add`).
//!
//! Definitions come from a lookup the caller provides ([`Defs`]), so the
//! engine works over whatever container the driver keeps them in. Facts are
//! computed on first use and cached.

use std::cell::RefCell;
use std::marker::PhantomData;

use ksc_ir::term::children;
use ksc_ir::{Callee, Def, Expr, FunName};
use rustc_hash::{FxHashMap, FxHashSet};

/// A lookup of global function definitions by their full name.
///
/// Besides [`Defs::def`], the engine asks questions whose answers do not
/// depend on every detail of a body; a driver that records what each
/// optimisation read (the incremental database) answers them itself, so
/// that editing a callee's body re-optimises only callers whose answers
/// changed. The defaults compute them from [`Defs::def`].
pub trait Defs {
    /// The definition of `name`, if it has one (built-ins and `edef`s have none).
    fn def(&self, name: &FunName) -> Option<&Def>;
    /// Does `name` have a definition?
    fn has_def(&self, name: &FunName) -> bool {
        self.def(name).is_some()
    }
    /// The definition of `name` if its body has at most `limit` nodes, as
    /// `measure` counts them.
    fn small_def(&self, name: &FunName, limit: usize, measure: Measure) -> Option<&Def> {
        self.def(name).filter(|d| measure.at_most(d, limit))
    }
    /// Effect and recursion of `name`, if the lookup knows them (else
    /// they are computed from the definitions).
    fn facts(&self, _name: &FunName) -> Option<Facts> {
        None
    }
}

/// How the size of a body is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Measure {
    /// The nodes reachable from the root.
    Tree,
    /// The nodes of the body's arena, reachable or not.
    Arena,
}

impl Measure {
    /// Does `def`'s body have at most `limit` nodes? (Stops counting past
    /// the limit.)
    pub fn at_most(self, def: &Def, limit: usize) -> bool {
        match self {
            Measure::Arena => def.body.exprs.len() <= limit,
            Measure::Tree => ksc_ir::term::tree_size_at_most(&def.body, def.root, limit) <= limit,
        }
    }
}

impl Defs for [Def] {
    fn def(&self, name: &FunName) -> Option<&Def> {
        self.iter().find(|d| d.name == *name)
    }
}

impl Defs for Vec<Def> {
    fn def(&self, name: &FunName) -> Option<&Def> {
        self.as_slice().def(name)
    }
}

impl Defs for FxHashMap<FunName, Def> {
    fn def(&self, name: &FunName) -> Option<&Def> {
        self.get(name)
    }
}

/// Definitions indexed by name, borrowed from wherever they live.
#[derive(Default)]
pub struct DefMap<'d> {
    map: FxHashMap<&'d FunName, &'d Def>,
}

impl<'d> DefMap<'d> {
    pub fn new(defs: impl IntoIterator<Item = &'d Def>) -> DefMap<'d> {
        let mut map = FxHashMap::default();
        for d in defs {
            map.entry(&d.name).or_insert(d);
        }
        DefMap { map }
    }
}

impl Defs for DefMap<'_> {
    fn def(&self, name: &FunName) -> Option<&Def> {
        self.map.get(name).copied()
    }
}

/// A lookup given as a callback.
pub struct Lookup<'d, F> {
    f: F,
    _defs: PhantomData<&'d Def>,
}

impl<'d, F: Fn(&FunName) -> Option<&'d Def>> Lookup<'d, F> {
    pub fn new(f: F) -> Lookup<'d, F> {
        Lookup { f, _defs: PhantomData }
    }
}

impl<'d, F: Fn(&FunName) -> Option<&'d Def>> Defs for Lookup<'d, F> {
    fn def(&self, name: &FunName) -> Option<&Def> {
        (self.f)(name)
    }
}

/// Facts about one function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Facts {
    /// May calling it print (directly or through its callees)?
    pub effect: bool,
    /// Can it call itself?
    pub recursive: bool,
}

/// The calls a definition's body makes and whether it prints by itself.
#[derive(Clone, Debug)]
struct Scan {
    callees: Vec<FunName>,
    prints: bool,
}

/// The engine's view of the global functions.
pub struct Globals<'g> {
    defs: Option<&'g dyn Defs>,
    scans: RefCell<FxHashMap<FunName, Scan>>,
    info: RefCell<FxHashMap<FunName, Facts>>,
    /// [`Globals::expanded_size`] so far: per function and limit, its size
    /// if known, else a size it is known to exceed.
    expanded: RefCell<FxHashMap<(FunName, usize), Result<usize, usize>>>,
    /// How many times a body's calls were asked for (the work of
    /// [`Globals::facts`], counted by tests).
    scan_calls: std::cell::Cell<usize>,
}

impl Globals<'static> {
    /// Nothing is known about the program: every call of a global function
    /// may have an effect, nothing is inlined, no call is constant-folded
    /// (the user may have replaced `add`).
    pub fn unknown() -> Globals<'static> {
        Globals {
            defs: None,
            scans: RefCell::default(),
            info: RefCell::default(),
            expanded: RefCell::default(),
            scan_calls: Default::default(),
        }
    }
}

impl<'g> Globals<'g> {
    /// The whole program's definitions: a function without a definition is
    /// a built-in (native prelude or `edef`), which has no effect.
    pub fn new(defs: &'g dyn Defs) -> Globals<'g> {
        Globals {
            defs: Some(defs),
            scans: RefCell::default(),
            info: RefCell::default(),
            expanded: RefCell::default(),
            scan_calls: Default::default(),
        }
    }

    /// How many times a body's calls were scanned so far: the work of
    /// [`Globals::facts`], which the tests bound (tests/globals.rs).
    #[doc(hidden)]
    pub fn scans_so_far(&self) -> usize {
        self.scan_calls.get()
    }

    /// Is the program known (see [`Globals::new`])?
    pub fn knows_program(&self) -> bool {
        self.defs.is_some()
    }

    /// The definition of `name`, if known.
    pub fn def(&self, name: &FunName) -> Option<&'g Def> {
        self.defs?.def(name)
    }

    /// Does `name` have a known definition?
    pub fn has_def(&self, name: &FunName) -> bool {
        self.defs.is_some_and(|d| d.has_def(name))
    }

    /// Is `name` known to be a built-in without a `.ks` definition (so its
    /// meaning is the native prelude's)?
    pub fn is_builtin(&self, name: &FunName) -> bool {
        self.defs.is_some_and(|d| !d.has_def(name))
    }

    /// The definition of `name` if its body has at most `limit` nodes.
    pub fn small_def(&self, name: &FunName, limit: usize, measure: Measure) -> Option<&'g Def> {
        self.defs?.small_def(name, limit, measure)
    }

    /// Effect and recursion of `name` (see [`Globals::may_have_effect`] and
    /// [`Globals::is_recursive`]), computed from the definitions.
    pub fn facts(&self, name: &FunName) -> Facts {
        self.info(name)
    }

    /// May calling `name` print (`print`, `$trace`), directly or through
    /// the functions it calls?
    pub fn may_have_effect(&self, name: &FunName) -> bool {
        match self.defs {
            None => true,
            Some(_) => self.info(name).effect,
        }
    }

    /// Can `name` call itself (directly or through other definitions)?
    /// Unknown programs: every function may be recursive.
    pub fn is_recursive(&self, name: &FunName) -> bool {
        match self.defs {
            None => true,
            Some(_) => self.info(name).recursive,
        }
    }

    fn scan(&self, name: &FunName) -> Option<Scan> {
        self.scan_calls.set(self.scan_calls.get() + 1);
        if let Some(s) = self.scans.borrow().get(name) {
            return Some(s.clone());
        }
        let def = self.def(name)?;
        let mut callees = Vec::new();
        let mut prints = false;
        let mut stack = vec![def.root];
        while let Some(e) = stack.pop() {
            let node = &def.body.exprs[e];
            match node {
                Expr::Call(Callee::Prim(p), _) if p.has_effect() => prints = true,
                Expr::Call(Callee::Fun(f), _) if !callees.contains(f) => callees.push(f.clone()),
                _ => {}
            }
            stack.extend(children(node));
        }
        let s = Scan { callees, prints };
        self.scans.borrow_mut().insert(name.clone(), s.clone());
        Some(s)
    }

    /// Effect and recursion of `name`, from the functions reachable from it.
    ///
    /// One pass (Tarjan's strongly connected components, iterative) gives
    /// the facts of every function reachable from `name` that are not known
    /// yet, so asking for every function of a program costs time linear in
    /// its size (a search per name was quadratic on a chain of calls): a
    /// function prints if one it reaches prints, and is recursive if it is
    /// in a cycle of calls.
    fn info(&self, name: &FunName) -> Facts {
        if let Some(i) = self.info.borrow().get(name) {
            return *i;
        }
        if let Some(i) = self.defs.and_then(|d| d.facts(name)) {
            self.info.borrow_mut().insert(name.clone(), i);
            return i;
        }
        struct Node {
            name: FunName,
            callees: Vec<FunName>,
            next: usize,
            low: usize,
            effect: bool,
            self_call: bool,
        }
        // Search state: `index` of every function visited, the Tarjan
        // stack, and the path of the depth-first search.
        let mut index: FxHashMap<FunName, usize> = FxHashMap::default();
        let mut nodes: Vec<Node> = Vec::new();
        let mut on_stack: Vec<usize> = Vec::new();
        let mut in_stack: FxHashSet<usize> = FxHashSet::default();
        let mut path: Vec<usize> = Vec::new();
        let visit = |f: &FunName, nodes: &mut Vec<Node>, index: &mut FxHashMap<FunName, usize>| -> usize {
            let s = self.scan(f);
            let (callees, prints) = s.map(|s| (s.callees, s.prints)).unwrap_or_default();
            let i = nodes.len();
            let self_call = callees.contains(f);
            nodes.push(Node { name: f.clone(), callees, next: 0, low: i, effect: prints, self_call });
            index.insert(f.clone(), i);
            i
        };
        let root = visit(name, &mut nodes, &mut index);
        on_stack.push(root);
        in_stack.insert(root);
        path.push(root);
        while let Some(&v) = path.last() {
            if nodes[v].next < nodes[v].callees.len() {
                let w = nodes[v].callees[nodes[v].next].clone();
                nodes[v].next += 1;
                if let Some(known) = self.info.borrow().get(&w).copied() {
                    nodes[v].effect |= known.effect;
                    continue;
                }
                match index.get(&w).copied() {
                    None => {
                        let wi = visit(&w, &mut nodes, &mut index);
                        on_stack.push(wi);
                        in_stack.insert(wi);
                        path.push(wi);
                    }
                    Some(wi) => {
                        if in_stack.contains(&wi) {
                            nodes[v].low = nodes[v].low.min(wi);
                        }
                        // Effects of a finished component are final; of one
                        // on the stack, merged when it completes.
                        nodes[v].effect |= nodes[wi].effect;
                    }
                }
                continue;
            }
            path.pop();
            if let Some(&u) = path.last() {
                nodes[u].low = nodes[u].low.min(nodes[v].low);
            }
            if nodes[v].low == v {
                // v is the root of a component: everything above it on the stack.
                let at = on_stack.iter().rposition(|&x| x == v).expect("on the stack");
                let members: Vec<usize> = on_stack.drain(at..).collect();
                let effect = members.iter().any(|&m| nodes[m].effect);
                let recursive = members.len() > 1 || nodes[v].self_call;
                let mut info = self.info.borrow_mut();
                for &m in &members {
                    in_stack.remove(&m);
                    nodes[m].effect = effect;
                    info.insert(nodes[m].name.clone(), Facts { effect, recursive });
                }
            }
            if let Some(&u) = path.last() {
                nodes[u].effect |= nodes[v].effect;
            }
        }
        self.info.borrow()[name]
    }

    /// The nodes `name`'s body has once every call in it of a small
    /// function (at most `limit` nodes, counted from the root, and not
    /// recursive) is inlined, and so on in what that brings in: what
    /// inlining `name` and then the small calls it exposes makes. None if
    /// `name` is not small itself, or that comes to more than `budget`
    /// nodes. It stops counting past `budget`, so it reads at most
    /// `budget` levels of calls.
    pub fn expanded_size(&self, name: &FunName, limit: usize, budget: usize) -> Option<usize> {
        let key = (name.clone(), limit);
        match self.expanded.borrow().get(&key) {
            Some(&Ok(n)) => return (n <= budget).then_some(n),
            Some(&Err(above)) if above >= budget => return None,
            _ => {}
        }
        let def = self.small_def(name, limit, Measure::Tree)?;
        let mut n = 0;
        let mut stack = vec![def.root];
        while let Some(x) = stack.pop() {
            n += 1;
            if n > budget {
                self.expanded.borrow_mut().insert(key, Err(budget));
                return None;
            }
            let node = &def.body.exprs[x];
            if let Expr::Call(Callee::Fun(h), _) = node {
                if h != name && self.small_def(h, limit, Measure::Tree).is_some() && !self.is_recursive(h) {
                    match self.expanded_size(h, limit, budget - n) {
                        Some(m) => n += m,
                        None => {
                            self.expanded.borrow_mut().insert(key, Err(budget));
                            return None;
                        }
                    }
                }
            }
            stack.extend(children(node));
        }
        if n > budget {
            self.expanded.borrow_mut().insert(key, Err(budget));
            return None;
        }
        self.expanded.borrow_mut().insert(key, Ok(n));
        Some(n)
    }

    /// The facts computed so far (of every function asked for with
    /// [`Globals::facts`] and of those it reaches).
    pub fn known_facts(&self) -> Vec<(FunName, Facts)> {
        self.info.borrow().iter().map(|(n, f)| (n.clone(), *f)).collect()
    }
}

/// The effects of calls for the term utilities' [`Cache::has_effect`]
/// (see [`Globals::may_have_effect`]).
///
/// [`Cache::has_effect`]: ksc_ir::term::Cache::has_effect
impl ksc_ir::term::CallEffects for Globals<'_> {
    fn may_have_effect(&self, name: &FunName) -> bool {
        Globals::may_have_effect(self, name)
    }
}
