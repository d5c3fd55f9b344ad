//! The evaluator: a resolution pass over every body, then a recursive
//! evaluator over Core IR with a single value stack.
//!
//! # Frames and slots
//!
//! Before running anything, every definition's body is walked once
//! ([`compile`]): each variable occurrence is resolved to a *slot*, its
//! position in the frame (parameters first, then `let` and lambda bindings by
//! nesting depth), each call of a global function to its target, and each
//! lambda records how many slots are in scope where it stands.
//!
//! At run time all frames live on one `Vec<Value>`; a frame is the stretch
//! starting at its `base`. The invariant is that while an expression at
//! nesting depth `d` is evaluated, the stack holds exactly `base + d` values,
//! so a `let` binding pushes its value into the slot the resolver gave it and
//! a variable lookup is `stack[base + slot]`: no names, no maps.
//!
//! # Lambdas
//!
//! A lambda written as an argument of a primitive (the only place the front
//! end allows one) is applied *in the frame it is written in*: its parameter
//! is pushed on top of the enclosing frame, whose slots it sees directly. A
//! lambda used anywhere else becomes a [`Closure`] that copies the enclosing
//! frame; applying it pushes that copy as a fresh frame.
//!
//! # Calls
//!
//! A call of a definition in tail position of a body (through `let`, `if`
//! and `assert`) replaces the current frame instead of nesting, so
//! tail-recursive loops run in constant space. Other calls nest on the
//! native stack; their depth is bounded only by the bytes of native stack
//! used (`stack_limit`, from the memory the user allows: `KSC_MAX_STACK`),
//! giving the error "recursion too deep" instead of a stack overflow.

use std::io::Write;
use std::rc::Rc;

use ksc_ir::{Callee, Def, Expr, ExprId, FunName, Lit, Pat, Prim};
use rustc_hash::FxHashMap;

use crate::native::{native_prelude, NativeFn};
use crate::value::{Closure, Value};
use crate::RuntimeError;

pub(crate) type R<T> = Result<T, Box<RuntimeError>>;

/// The raw position of an expression in its arena.
fn raw(id: ExprId) -> usize {
    u32::from(id.into_raw()) as usize
}

/// What the resolver found out about one expression.
#[derive(Clone, Copy, Debug)]
enum Aux {
    Nothing,
    /// A variable in this slot of the frame.
    Slot(u32),
    /// A variable not in scope (only in ill-formed input).
    Unbound,
    /// A call of the definition with this index.
    Def(u32),
    /// A call of a native prelude function.
    Native(NativeFn),
    /// A call of a function with neither a definition nor a native
    /// implementation: an `edef` without implementation.
    Missing,
    /// A lambda, with the number of slots in scope where it stands.
    Lam(u32),
    /// A string literal, interned in `Compiled::strings`.
    Str(u32),
}

impl Aux {
    /// Do two resolutions of one (shared) expression agree?
    fn agrees(self, other: Aux) -> bool {
        match (self, other) {
            (Aux::Slot(a), Aux::Slot(b)) | (Aux::Lam(a), Aux::Lam(b)) => a == b,
            (Aux::Unbound, Aux::Unbound) => true,
            (Aux::Slot(_) | Aux::Lam(_) | Aux::Unbound, _) | (_, Aux::Slot(_) | Aux::Lam(_) | Aux::Unbound) => false,
            _ => true,
        }
    }
}

/// A definition ready to run.
pub(crate) struct Compiled<'a> {
    pub(crate) id: u32,
    pub(crate) def: &'a Def,
    /// Indexed by the raw expression id.
    aux: Vec<Aux>,
    /// Indexed by the raw expression id: may evaluating this variable take
    /// its value (or, under `get$i$n`, that component of it) out of the
    /// frame? (It is the last use: see `last_uses`.)
    moves: Vec<Move>,
    strings: Vec<Rc<str>>,
    /// Why the body cannot run, if it is not a well-formed tree.
    malformed: Option<String>,
}

impl Compiled<'_> {
    fn aux(&self, e: ExprId) -> Aux {
        self.aux.get(raw(e)).copied().unwrap_or(Aux::Nothing)
    }

    fn moves(&self, e: ExprId) -> Move {
        self.moves.get(raw(e)).copied().unwrap_or(Move::No)
    }

    /// Is `e` an expression of this body?
    pub(crate) fn contains(&self, e: ExprId) -> bool {
        raw(e) < self.def.body.exprs.len()
    }
}

/// The program: every definition, and an index by name.
pub(crate) struct Prog<'a> {
    pub(crate) defs: Vec<Compiled<'a>>,
    pub(crate) by_name: FxHashMap<&'a FunName, u32>,
}

impl<'a> Prog<'a> {
    pub(crate) fn new(defs: impl IntoIterator<Item = &'a Def>) -> Prog<'a> {
        let defs: Vec<&'a Def> = defs.into_iter().collect();
        let mut by_name = FxHashMap::default();
        for (i, d) in defs.iter().enumerate() {
            // The first definition of a name wins (the front end rejects duplicates).
            by_name.entry(&d.name).or_insert(i as u32);
        }
        let defs = defs.iter().enumerate().map(|(i, d)| compile(i as u32, d, &by_name)).collect();
        Prog { defs, by_name }
    }

    pub(crate) fn def(&self, i: u32) -> Option<&Compiled<'a>> {
        self.defs.get(i as usize)
    }
}

/// The names the parameters bind, in slot order.
fn param_names(def: &Def) -> impl Iterator<Item = &str> {
    def.params.iter().map(|p| p.name.as_str())
}

/// Resolves every expression of a body (see the module documentation). The
/// walk is iterative, so arbitrarily deep bodies cannot overflow the stack,
/// and it rejects ill-formed bodies (dangling ids, cycles, subtrees shared
/// between different scopes) instead of letting evaluation misbehave.
fn compile<'a>(id: u32, def: &'a Def, by_name: &FxHashMap<&'a FunName, u32>) -> Compiled<'a> {
    enum Task<'e> {
        Visit(ExprId),
        Bind(&'e [String]),
        Unbind(usize),
        /// Marks the trace (see `Event`) after the children of an `if`'s
        /// branch, of a lambda, or of a call.
        Mark(Event),
    }
    let body = &def.body;
    let n = body.exprs.len();
    let mut aux = vec![Aux::Nothing; n];
    let mut seen = vec![false; n];
    let mut shared = vec![false; n];
    let mut strings = Vec::new();
    let mut scope: Vec<&str> = param_names(def).collect();
    let mut tasks = vec![Task::Visit(def.root)];
    let mut visits = 0usize;
    let mut malformed = None;
    // The evaluation order of the body, for the analysis of last uses; and
    // the slots of the frame each lambda reads (by the lambda's id).
    let mut trace: Vec<Event> = Vec::new();
    let mut lambdas: Vec<(ExprId, u32)> = Vec::new();
    let mut captured: FxHashMap<ExprId, Vec<u32>> = FxHashMap::default();
    let mut projected: FxHashMap<ExprId, u32> = FxHashMap::default();
    while let Some(task) = tasks.pop() {
        let e = match task {
            Task::Visit(e) => e,
            Task::Bind(vars) => {
                trace.push(Event::Bind(scope.len() as u32, vars.len() as u32));
                scope.extend(vars.iter().map(String::as_str));
                continue;
            }
            Task::Unbind(k) => {
                scope.truncate(scope.len().saturating_sub(k));
                trace.push(Event::Unbind(scope.len() as u32, k as u32));
                continue;
            }
            Task::Mark(ev) => {
                if let Event::LamEnd(..) = ev {
                    lambdas.pop();
                }
                trace.push(ev);
                continue;
            }
        };
        if raw(e) >= n {
            malformed = Some(format!("it refers to a missing expression {e:?}"));
            break;
        }
        visits += 1;
        if visits > 2 * n + 16 {
            malformed = Some("it is not a tree".to_string());
            break;
        }
        let resolved = match &body.exprs[e] {
            Expr::Lit(Lit::String(s)) => {
                strings.push(Rc::from(s.as_str()));
                Aux::Str(strings.len() as u32 - 1)
            }
            Expr::Lit(_) | Expr::Dummy(_) => Aux::Nothing,
            Expr::Var(v) => match scope.iter().rposition(|w| w == v) {
                Some(slot) => {
                    trace.push(Event::Use(e, slot as u32));
                    // Lambdas it is inside of, that read it from the frame.
                    for &(lam, boundary) in lambdas.iter().rev() {
                        if slot as u32 >= boundary {
                            break;
                        }
                        captured.entry(lam).or_default().push(slot as u32);
                    }
                    Aux::Slot(slot as u32)
                }
                None => Aux::Unbound,
            },
            Expr::Call(callee, arg) => {
                // Lambdas written among a primitive's arguments run after
                // every argument is evaluated.
                let expr_at = |x: ExprId| (raw(x) < n).then(|| &body.exprs[x]);
                let lams: Vec<ExprId> = match expr_at(*arg) {
                    Some(Expr::Tuple(es)) => {
                        es.iter().copied().filter(|&c| matches!(expr_at(c), Some(Expr::Lam(..)))).collect()
                    }
                    Some(Expr::Lam(..)) => vec![*arg],
                    _ => Vec::new(),
                };
                if !lams.is_empty() {
                    tasks.push(Task::Mark(Event::CallEnd(lams)));
                }
                // `get$i$n x` reads one component of x.
                if let (Callee::Prim(Prim::Get { index, .. }), Some(Expr::Var(_))) = (callee, expr_at(*arg)) {
                    projected.insert(*arg, index.saturating_sub(1));
                }
                tasks.push(Task::Visit(*arg));
                match callee {
                    Callee::Prim(_) => Aux::Nothing,
                    Callee::Fun(name) => match by_name.get(name) {
                        Some(&d) => Aux::Def(d),
                        None => native_prelude(name).map_or(Aux::Missing, Aux::Native),
                    },
                }
            }
            Expr::Tuple(es) => {
                tasks.extend(es.iter().rev().map(|&c| Task::Visit(c)));
                Aux::Nothing
            }
            Expr::Let(pat, rhs, next) => {
                let vars = pat.vars();
                tasks.extend([Task::Unbind(vars.len()), Task::Visit(*next), Task::Bind(vars), Task::Visit(*rhs)]);
                Aux::Nothing
            }
            Expr::If(c, t, f) => {
                tasks.extend([
                    Task::Mark(Event::IfEnd),
                    Task::Visit(*f),
                    Task::Mark(Event::Else),
                    Task::Visit(*t),
                    Task::Mark(Event::Then),
                    Task::Visit(*c),
                ]);
                Aux::Nothing
            }
            Expr::Assert(c, next, _) => {
                tasks.extend([Task::Visit(*next), Task::Visit(*c)]);
                Aux::Nothing
            }
            Expr::Lam(v, _, lam_body) => {
                tasks.extend([
                    Task::Mark(Event::LamEnd(scope.len() as u32)),
                    Task::Unbind(1),
                    Task::Visit(*lam_body),
                    Task::Bind(std::slice::from_ref(v)),
                ]);
                trace.push(Event::LamStart(e, scope.len() as u32));
                lambdas.push((e, scope.len() as u32));
                Aux::Lam(scope.len() as u32)
            }
        };
        let i = raw(e);
        if seen[i] && !aux[i].agrees(resolved) {
            malformed = Some(format!("expression {e:?} is shared between different scopes"));
            break;
        }
        if seen[i] {
            shared[i] = true;
        }
        seen[i] = true;
        aux[i] = resolved;
    }
    let moves = if malformed.is_some() { Vec::new() } else { last_uses(n, &trace, &captured, &projected, &shared) };
    Compiled { id, def, aux, moves, strings, malformed }
}

/// What evaluating a variable expression may take out of its slot.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Move {
    No,
    /// The value: this is its last use.
    Whole,
    /// Component i of the tuple (the variable is the argument of a
    /// `get$i$n`): the last use of that component, and the tuple is not
    /// used whole again.
    Component,
}

/// A set of slots of a frame, as bits (an `if` copies the set live after
/// it: a word per 64 slots).
#[derive(Clone, Default)]
struct Slots(Vec<u64>);

impl Slots {
    fn contains(&self, s: u32) -> bool {
        self.0.get(s as usize / 64).is_some_and(|w| w >> (s % 64) & 1 == 1)
    }

    fn insert(&mut self, s: u32) {
        let i = s as usize / 64;
        if self.0.len() <= i {
            self.0.resize(i + 1, 0);
        }
        self.0[i] |= 1 << (s % 64);
    }

    fn remove(&mut self, s: u32) {
        if let Some(w) = self.0.get_mut(s as usize / 64) {
            *w &= !(1 << (s % 64));
        }
    }

    fn union(&mut self, other: &Slots) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (w, o) in self.0.iter_mut().zip(&other.0) {
            *w |= o;
        }
    }

    /// Removes every slot from `n` on.
    fn truncate(&mut self, n: u32) {
        let i = n as usize / 64;
        self.0.truncate(i + 1);
        if let Some(w) = self.0.get_mut(i) {
            *w &= (1u64 << (n % 64)) - 1;
        }
    }
}

/// What is read later, in the backward walk of `last_uses`.
#[derive(Clone, Default)]
struct Live {
    whole: Slots,
    comps: FxHashMap<u32, u64>,
}

/// What evaluating a body does, in order, as far as the analysis of last
/// uses needs it.
enum Event {
    /// The variable expression reads this slot of the frame.
    Use(ExprId, u32),
    /// `let` (or a lambda's parameter) binds these slots (first, count).
    Bind(u32, u32),
    /// Their scope ends.
    Unbind(u32, u32),
    /// An `if`'s condition is done and its first branch begins; the
    /// second branch begins; both are done.
    Then,
    Else,
    IfEnd,
    /// A lambda (its id, and the slots in scope where it stands) and its
    /// end.
    LamStart(ExprId, u32),
    LamEnd(u32),
    /// The arguments of a primitive are evaluated; its lambdas, written
    /// among them, run now.
    CallEnd(Vec<ExprId>),
}

/// Which variable expressions are the last use of their slot's value, so
/// that evaluating them may take the value out of the frame (and an
/// operation that writes into a tensor, such as `ts_add` of an
/// accumulator, finds it unshared and writes in place instead of copying).
/// A backward walk over the trace with the set of slots read later: a use
/// is last if its slot is not in the set; an `if`'s branches each start
/// from the set after the `if`; a lambda's reads of slots outside it are
/// never last (it may run many times), and those slots are read wherever
/// the lambda runs: where it stands (a closure copies them), and when its
/// primitive runs, after all of the primitive's arguments. An expression
/// evaluated at two places (a shared subtree) never moves.
fn last_uses(
    n: usize,
    trace: &[Event],
    captured: &FxHashMap<ExprId, Vec<u32>>,
    projected: &FxHashMap<ExprId, u32>,
    shared: &[bool],
) -> Vec<Move> {
    let mut moves = vec![Move::No; n];
    // The slots read whole later, and the components (below 64) of those
    // read through `get$i$n` later, by slot.
    let mut live = Live::default();
    // Per `if` being walked: the set after it, and that before its second
    // branch once walked.
    let mut ifs: Vec<(Live, Live)> = Vec::new();
    // The slots in scope at each lambda being walked.
    let mut boundaries: Vec<u32> = Vec::new();
    let read_by = |lams: &[ExprId], live: &mut Live| {
        for lam in lams {
            captured.get(lam).into_iter().flatten().for_each(|&s| live.whole.insert(s));
        }
    };
    for ev in trace.iter().rev() {
        match ev {
            Event::Use(e, slot) => {
                let inside_lambda = boundaries.last().is_some_and(|&b| *slot < b);
                let may =
                    !inside_lambda && !shared.get(raw(*e)).copied().unwrap_or(true) && !live.whole.contains(*slot);
                let comps = live.comps.get(slot).copied().unwrap_or(0);
                match projected.get(e).filter(|&&k| k < 64) {
                    Some(&k) => {
                        if may && comps & (1 << k) == 0 {
                            moves[raw(*e)] = Move::Component;
                        }
                        *live.comps.entry(*slot).or_insert(0) |= 1 << k;
                    }
                    None => {
                        if may && comps == 0 {
                            moves[raw(*e)] = Move::Whole;
                        }
                        live.whole.insert(*slot);
                    }
                }
            }
            Event::Bind(first, k) | Event::Unbind(first, k) => {
                for s in *first..first + k {
                    live.whole.remove(s);
                    live.comps.remove(&s);
                }
            }
            Event::IfEnd => ifs.push((live.clone(), Live::default())),
            Event::Else => {
                if let Some((after, second)) = ifs.last_mut() {
                    *second = std::mem::replace(&mut live, after.clone());
                }
            }
            Event::Then => {
                if let Some((_, second)) = ifs.pop() {
                    live.whole.union(&second.whole);
                    for (s, m) in second.comps {
                        *live.comps.entry(s).or_insert(0) |= m;
                    }
                }
            }
            Event::LamEnd(boundary) => boundaries.push(*boundary),
            Event::LamStart(lam, boundary) => {
                boundaries.pop();
                live.whole.truncate(*boundary);
                live.comps.retain(|&s, _| s < *boundary);
                read_by(std::slice::from_ref(lam), &mut live);
            }
            Event::CallEnd(lams) => read_by(lams, &mut live),
        }
    }
    moves
}

/// The arguments of a call of a definition, before they are bound.
pub(crate) enum Args {
    /// The argument value, to be bound to the parameter(s).
    Whole(Value),
    /// The parameters' values, one each.
    Spread(Vec<Value>),
}

/// A lambda ready to be applied: where its frame is and where its body is.
pub(crate) struct Lambda<'p, 'a> {
    cx: &'p Compiled<'a>,
    base: usize,
    /// The stack height under the parameter.
    frame: usize,
    body: ExprId,
    /// The stack height to return to when done.
    restore: usize,
}

/// The calling frames a run-time error lists (native code's runtime lists
/// as many, `KSRT_REPORTED_FRAMES`); it counts the others.
const LISTED_FRAMES: usize = 10_000;

/// The address of a local, to measure how much native stack is in use.
fn stack_address() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// The state of one top-level call.
pub(crate) struct Machine<'p, 'a, 'o> {
    pub(crate) prog: &'p Prog<'a>,
    pub(crate) stack: Vec<Value>,
    pub(crate) out: &'o mut dyn Write,
    /// Calls evaluated (of functions, natives and primitives): the
    /// interpreter's deterministic measure of work.
    pub(crate) ops: u64,
    /// Past this many `ops`, a call of a function fails
    /// ([`crate::Interpreter::set_call_limit`]).
    pub(crate) ops_limit: u64,
    stack_origin: usize,
    stack_limit: usize,
}

impl<'p, 'a, 'o> Machine<'p, 'a, 'o> {
    pub(crate) fn new(prog: &'p Prog<'a>, stack: Vec<Value>, out: &'o mut dyn Write, stack_limit: usize) -> Self {
        Machine { prog, stack, out, ops: 0, ops_limit: u64::MAX, stack_origin: stack_address(), stack_limit }
    }

    /// Counts `n` operations, on the current chain of the span too.
    pub(crate) fn count_ops(&mut self, n: u64) {
        self.ops += n;
        crate::ops::count_span(n);
    }

    /// An error at expression `at` of `cx`'s body.
    pub(crate) fn fail(&self, cx: &Compiled, at: ExprId, message: impl Into<String>) -> Box<RuntimeError> {
        Box::new(RuntimeError {
            message: message.into(),
            location: Some((cx.def.name.clone(), at)),
            stack: Vec::new(),
            elided: 0,
        })
    }

    /// Attaches a location to a plain error message.
    pub(crate) fn at<T>(&self, cx: &Compiled, at: ExprId, r: Result<T, String>) -> R<T> {
        r.map_err(|m| self.fail(cx, at, m))
    }

    /// Calls a function by name from outside.
    pub(crate) fn call_top(&mut self, name: &FunName, arg: Value) -> R<Value> {
        let top = |message: String| Box::new(RuntimeError { message, location: None, stack: Vec::new(), elided: 0 });
        if let Some(cx) = self.prog.by_name.get(name).and_then(|&d| self.prog.def(d)) {
            if let Some(why) = &cx.malformed {
                return Err(top(format!("internal error: the body of `{name}` is malformed: {why}")));
            }
            self.bind_args(cx, Args::Whole(arg)).map_err(top)?;
            return self.eval(cx, 0, cx.def.root, true);
        }
        match native_prelude(name) {
            Some(f) => f.call(&arg).map_err(top),
            None => Err(top(format!("there is no definition of `{name}`"))),
        }
    }

    /// Evaluates expression `e` of `cx`'s body in the frame at `base`.
    ///
    /// `let`, `if` and `assert` continue in this loop rather than recursing.
    /// With `tail`, `e` is in tail position of a function body whose frame
    /// starts at `base`: a call of a definition then reuses the frame, and the
    /// caller of `eval` pops the frame.
    pub(crate) fn eval(&mut self, mut cx: &'p Compiled<'a>, base: usize, mut e: ExprId, tail: bool) -> R<Value> {
        let entry = self.stack.len();
        let value = loop {
            match &cx.def.body.exprs[e] {
                Expr::Lit(lit) => {
                    break match lit {
                        Lit::Integer(i) => Value::Integer(*i),
                        Lit::Float(x) => Value::Float(*x),
                        Lit::Bool(b) => Value::Bool(*b),
                        Lit::String(s) => match cx.aux(e) {
                            Aux::Str(k) => match cx.strings.get(k as usize) {
                                Some(s) => Value::String(s.clone()),
                                None => Value::string(s),
                            },
                            _ => Value::string(s),
                        },
                    }
                }
                Expr::Var(v) => {
                    let found = match cx.aux(e) {
                        Aux::Slot(slot) if cx.moves(e) == Move::Whole => {
                            self.stack.get_mut(base + slot as usize).map(|v| std::mem::replace(v, Value::moved()))
                        }
                        Aux::Slot(slot) => self.stack.get(base + slot as usize).cloned(),
                        _ => None,
                    };
                    match found {
                        Some(value) => break value,
                        None => return Err(self.fail(cx, e, format!("variable `{v}` is not in scope"))),
                    }
                }
                Expr::Let(pat, rhs, next) => {
                    let v = self.eval(cx, base, *rhs, false)?;
                    self.bind(cx, e, pat, v)?;
                    e = *next;
                }
                Expr::If(c, t, f) => {
                    e = if self.eval_bool(cx, base, *c)? { *t } else { *f };
                }
                Expr::Assert(c, next, _) => {
                    if !self.eval_bool(cx, base, *c)? {
                        return Err(self.fail(cx, e, "assertion failed"));
                    }
                    e = *next;
                }
                Expr::Call(Callee::Fun(name), arg) => {
                    self.count_ops(1);
                    if self.ops > self.ops_limit {
                        return Err(self.fail(
                            cx,
                            e,
                            format!("the run took more than {} operations (a loop that never ends?)", self.ops_limit),
                        ));
                    }
                    match cx.aux(e) {
                        Aux::Def(d) if tail => {
                            // A tail call: evaluate the arguments, then replace this frame.
                            let callee = self.callee(cx, e, d)?;
                            let args = self.eval_args(cx, base, *arg, callee)?;
                            self.stack.truncate(base);
                            let r = self.bind_args(callee, args);
                            self.at(cx, e, r)?;
                            cx = callee;
                            e = callee.def.root;
                        }
                        Aux::Def(d) => break self.call_def(cx, base, e, *arg, d)?,
                        Aux::Native(f) => break self.call_native(cx, base, e, *arg, f)?,
                        _ => {
                            return Err(self.fail(
                                cx,
                                e,
                                format!(
                                    "`{name}` has no definition to run: it is only declared (native code calls \
                                     its C function: `ksc run --link FILE`)"
                                ),
                            ))
                        }
                    }
                }
                // The last read of a component of a tuple variable takes it
                // out of the tuple, if nothing else holds the tuple.
                Expr::Call(Callee::Prim(p @ Prim::Get { index, arity }), arg) if cx.moves(*arg) == Move::Component => {
                    match self.take_component(cx, base, *arg, *index, *arity) {
                        Some(v) => break v,
                        None => break self.eval_prim(cx, base, e, *p, *arg)?,
                    }
                }
                Expr::Call(Callee::Prim(p), arg) => {
                    // Projections are free once tuples are scalar-replaced.
                    if !matches!(p, ksc_ir::Prim::Get { .. }) {
                        self.count_ops(1);
                    }
                    break self.eval_prim(cx, base, e, *p, *arg)?;
                }
                Expr::Tuple(es) => break self.eval_tuple(cx, base, es)?,
                Expr::Lam(..) => break self.make_closure(cx, base, e)?,
                Expr::Dummy(t) => break self.at(cx, e, crate::ops::dummy(t))?,
            }
        };
        if !tail {
            self.stack.truncate(entry);
        }
        Ok(value)
    }

    fn eval_bool(&mut self, cx: &'p Compiled<'a>, base: usize, e: ExprId) -> R<bool> {
        match self.eval(cx, base, e, false)? {
            Value::Bool(b) => Ok(b),
            v => Err(self.fail(cx, e, format!("internal error: expected a Bool, found {}", v.kind()))),
        }
    }

    /// Binds a `let` pattern by pushing its variables' values.
    /// Component `index` (of `arity`) of the tuple in the slot of the
    /// variable `var`, taken out of it if nothing else holds the tuple
    /// (else a copy); `None` if the slot holds no such tuple.
    fn take_component(&mut self, cx: &Compiled, base: usize, var: ExprId, index: u32, arity: u32) -> Option<Value> {
        let Aux::Slot(slot) = cx.aux(var) else { return None };
        let Some(Value::Tuple(t)) = self.stack.get_mut(base + slot as usize) else { return None };
        let k = (index as usize).checked_sub(1)?;
        if t.len() != arity as usize || k >= t.len() {
            return None;
        }
        Some(match Rc::get_mut(t) {
            Some(owned) => std::mem::replace(&mut owned[k], Value::moved()),
            None => t[k].clone(),
        })
    }

    fn bind(&mut self, cx: &Compiled, at: ExprId, pat: &Pat, v: Value) -> R<()> {
        match pat {
            Pat::Var(_) => self.stack.push(v),
            Pat::Tuple(vars) => match v {
                // Unshared (its variable's last use): its components move.
                Value::Tuple(mut vs) if vs.len() == vars.len() => match Rc::get_mut(&mut vs) {
                    Some(owned) => self.stack.extend(owned.iter_mut().map(|c| std::mem::replace(c, Value::moved()))),
                    None => self.stack.extend(vs.iter().cloned()),
                },
                _ => {
                    return Err(self.fail(
                        cx,
                        at,
                        format!("internal error: a pattern of {} variables bound to {}", vars.len(), v.kind()),
                    ))
                }
            },
        }
        Ok(())
    }

    #[inline(never)]
    fn eval_tuple(&mut self, cx: &'p Compiled<'a>, base: usize, es: &[ExprId]) -> R<Value> {
        let mut vs = Vec::with_capacity(es.len());
        for &c in es {
            vs.push(self.eval(cx, base, c, false)?);
        }
        Ok(Value::Tuple(Rc::from(vs)))
    }

    /// A lambda outside the argument list of a primitive: a closure copying the frame.
    #[inline(never)]
    pub(crate) fn make_closure(&mut self, cx: &'p Compiled<'a>, base: usize, e: ExprId) -> R<Value> {
        let env = match cx.aux(e) {
            Aux::Lam(d) => self.stack.get(base..base + d as usize).map(<[Value]>::to_vec),
            _ => None,
        };
        match env {
            Some(env) => Ok(Value::Closure(Rc::new(Closure { def: cx.id, lam: e, env }))),
            None => Err(self.fail(cx, e, "internal error: a lambda out of its scope")),
        }
    }

    /// The definition a call refers to, checked to be runnable.
    fn callee(&self, cx: &Compiled, call: ExprId, d: u32) -> R<&'p Compiled<'a>> {
        let prog: &'p Prog<'a> = self.prog;
        let Some(callee) = prog.def(d) else {
            return Err(self.fail(cx, call, "internal error: a call of a missing definition"));
        };
        if let Some(why) = &callee.malformed {
            let msg = format!("internal error: the body of `{}` is malformed: {why}", callee.def.name);
            return Err(self.fail(cx, call, msg));
        }
        Ok(callee)
    }

    /// Evaluates the argument of a call of `callee`, spreading a literal
    /// tuple over the parameters without building the tuple.
    fn eval_args(&mut self, cx: &'p Compiled<'a>, base: usize, arg: ExprId, callee: &Compiled) -> R<Args> {
        let n = callee.def.params.len();
        match &cx.def.body.exprs[arg] {
            Expr::Tuple(es) if n != 1 && es.len() == n => {
                let mut vs = Vec::with_capacity(n);
                for &c in es {
                    vs.push(self.eval(cx, base, c, false)?);
                }
                Ok(Args::Spread(vs))
            }
            _ => Ok(Args::Whole(self.eval(cx, base, arg, false)?)),
        }
    }

    /// Pushes the parameters of `callee` (the frame must start at the top).
    fn bind_args(&mut self, callee: &Compiled, args: Args) -> Result<(), String> {
        let n = callee.def.params.len();
        match args {
            Args::Whole(v) if n == 1 => self.stack.push(v),
            Args::Whole(Value::Tuple(vs)) if vs.len() == n => self.stack.extend(vs.iter().cloned()),
            Args::Spread(vs) if vs.len() == n => self.stack.extend(vs),
            Args::Whole(v) => {
                return Err(format!(
                    "internal error: `{}` takes {n} arguments, but was given {}",
                    callee.def.name,
                    v.kind()
                ))
            }
            Args::Spread(vs) => {
                return Err(format!(
                    "internal error: `{}` takes {n} arguments, but was given {}",
                    callee.def.name,
                    vs.len()
                ))
            }
        }
        Ok(())
    }

    /// A nested (non-tail) call of a definition.
    #[inline(never)]
    fn call_def(&mut self, cx: &'p Compiled<'a>, base: usize, call: ExprId, arg: ExprId, d: u32) -> R<Value> {
        let callee = self.callee(cx, call, d)?;
        let args = self.eval_args(cx, base, arg, callee)?;
        if self.stack_origin.abs_diff(stack_address()) > self.stack_limit {
            return Err(self.fail(cx, call, "recursion too deep"));
        }
        let new_base = self.stack.len();
        let r = self.bind_args(callee, args);
        self.at(cx, call, r)?;
        let r = self.eval(callee, new_base, callee.def.root, true);
        self.stack.truncate(new_base);
        r.map_err(|mut err| {
            // The innermost frames, and how many more (a recursion as deep
            // as the stack allows has millions).
            if err.stack.len() < LISTED_FRAMES {
                err.stack.push((cx.def.name.clone(), call));
            } else {
                err.elided += 1;
            }
            err
        })
    }

    /// A call of a native prelude function.
    #[inline(never)]
    fn call_native(&mut self, cx: &'p Compiled<'a>, base: usize, call: ExprId, arg: ExprId, f: NativeFn) -> R<Value> {
        let r = match &cx.def.body.exprs[arg] {
            // The common case `(add x y)`: no tuple is built.
            Expr::Tuple(es) if f.arity != 1 && es.len() == f.arity && es.len() <= 4 => {
                let mut buf = [Value::Integer(0), Value::Integer(0), Value::Integer(0), Value::Integer(0)];
                for (slot, &c) in buf.iter_mut().zip(es) {
                    *slot = self.eval(cx, base, c, false)?.densified();
                }
                (f.imp)(buf.get(..es.len()).unwrap_or_default())
            }
            _ => {
                let v = self.eval(cx, base, arg, false)?.densified();
                f.call(&v)
            }
        };
        self.at(cx, call, r)
    }

    /// Prepares the lambda written at `lam` (a `Lam` expression of `cx`) for
    /// application in the current frame.
    pub(crate) fn open_in_frame(&mut self, cx: &'p Compiled<'a>, base: usize, lam: ExprId) -> Option<Lambda<'p, 'a>> {
        let Expr::Lam(_, _, body) = &cx.def.body.exprs[lam] else {
            return None;
        };
        let Aux::Lam(d) = cx.aux(lam) else {
            return None;
        };
        let frame = base + d as usize;
        (frame == self.stack.len()).then_some(Lambda { cx, base, frame, body: *body, restore: frame })
    }

    /// Prepares a closure value for application: pushes its frame.
    pub(crate) fn open_closure(&mut self, c: &Closure) -> Option<Lambda<'p, 'a>> {
        let prog: &'p Prog<'a> = self.prog;
        let cx = prog.def(c.def)?;
        if !cx.contains(c.lam) || cx.malformed.is_some() {
            return None;
        }
        let Expr::Lam(_, _, body) = &cx.def.body.exprs[c.lam] else {
            return None;
        };
        if !matches!(cx.aux(c.lam), Aux::Lam(d) if d as usize == c.env.len()) {
            return None;
        }
        let restore = self.stack.len();
        self.stack.extend(c.env.iter().cloned());
        Some(Lambda { cx, base: restore, frame: self.stack.len(), body: *body, restore })
    }

    /// Applies an open lambda.
    pub(crate) fn apply(&mut self, l: &Lambda<'p, 'a>, arg: Value) -> R<Value> {
        self.stack.truncate(l.frame);
        self.stack.push(arg);
        self.eval(l.cx, l.base, l.body, false)
    }

    /// Pops what opening a lambda pushed.
    pub(crate) fn close(&mut self, l: Lambda<'p, 'a>) {
        self.stack.truncate(l.restore);
    }
}
