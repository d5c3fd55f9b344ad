//! Lowering the surface syntax tree to Core IR, keeping the source positions
//! in a separate span map.
//!
//! Lowering resolves nothing: names stay as written (with the base type only
//! if the source wrote one) and types are filled in by the checker. It desugars
//! binding-list `let`s into nested `let`s and multi-argument calls into calls
//! of a literal tuple.

use ksc_ir::{Body, Callee, Decl, Def, Edef, Expr, ExprId, FunName, Gdef, Lit, Param, Pat, Prim, Rule, Type};
use ksc_syntax::{ast, Span};
use la_arena::ArenaMap;

/// Where the parts of one declaration are in the source.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeclSpans {
    /// The whole declaration.
    pub decl: Span,
    /// The function name (or the rule's name).
    pub name: Span,
    /// The declared result type (def, edef), or a gdef's schedule.
    pub ret_ty: Span,
    /// The argument type of an edef, or the parameter list of a def or rule.
    pub params: Span,
    /// Each parameter.
    pub param: Vec<Span>,
    /// Every expression of the body.
    pub exprs: ArenaMap<ExprId, Span>,
    /// A strategy's body: each node of its term, in pre-order
    /// (`ksc_ir::STerm::pre_order`).
    pub terms: Vec<Span>,
}

impl DeclSpans {
    pub fn expr(&self, e: ExprId) -> Span {
        self.exprs.get(e).copied().unwrap_or(self.decl)
    }
}

/// Lower a whole file. Declarations are independent; lowering cannot fail.
pub fn lower_file(file: &ast::SourceFile) -> (Vec<Decl>, Vec<DeclSpans>) {
    file.decls.iter().map(lower_decl).unzip()
}

pub fn lower_decl(d: &ast::Decl) -> (Decl, DeclSpans) {
    let mut spans = DeclSpans { decl: d.span(), ..DeclSpans::default() };
    let decl = match d {
        ast::Decl::Def(d) => {
            spans.name = d.name.span;
            spans.ret_ty = d.ret_ty.span;
            spans.params = d.params.span;
            spans.param = d.params.params.iter().map(|p| p.span).collect();
            let mut body = Body::new();
            let root = lower_expr(&mut body, &mut spans, &d.body);
            Decl::Def(Def {
                name: lower_fun_name(&d.name),
                params: lower_params(&d.params),
                ret_ty: lower_type(&d.ret_ty),
                body,
                root,
            })
        }
        ast::Decl::Edef(d) => {
            spans.name = d.name.span;
            spans.ret_ty = d.ret_ty.span;
            spans.params = d.arg_ty.span;
            Decl::Edef(Edef {
                name: lower_fun_name(&d.name),
                ret_ty: lower_type(&d.ret_ty),
                arg_ty: lower_type(&d.arg_ty),
            })
        }
        ast::Decl::Gdef(d) => {
            spans.name = d.fun.span;
            spans.params = d.derivation_span;
            if let Some(s) = &d.schedule {
                spans.ret_ty = s.span;
            }
            let schedule = d.schedule.as_ref().map(|s| s.text.clone());
            Decl::Gdef(Gdef { derivation: d.derivation, fun: lower_fun_name(&d.fun), schedule })
        }
        ast::Decl::Rule(r) => {
            spans.name = r.name_span;
            spans.params = r.params.span;
            spans.param = r.params.params.iter().map(|p| p.span).collect();
            let mut body = Body::new();
            let lhs = lower_expr(&mut body, &mut spans, &r.lhs);
            let rhs = lower_expr(&mut body, &mut spans, &r.rhs);
            Decl::Rule(Rule { name: r.name.clone(), params: lower_params(&r.params), body, lhs, rhs })
        }
        ast::Decl::Strategy(s) => {
            spans.name = s.name.span;
            spans.param = s.params.iter().map(|p| p.span).collect();
            let (decl, terms) = ksc_ir::StrategyDecl::from_ast(s);
            spans.terms = terms;
            Decl::Strategy(decl)
        }
    };
    (decl, spans)
}

fn lower_params(ps: &ast::Params) -> Vec<Param> {
    ps.params.iter().map(|p| Param { name: p.name.text.clone(), ty: lower_type(&p.ty) }).collect()
}

pub fn lower_type(t: &ast::Type) -> Type {
    match &t.kind {
        ast::TypeKind::Bool => Type::Bool,
        ast::TypeKind::Integer => Type::Integer,
        ast::TypeKind::Float => Type::Float,
        ast::TypeKind::String => Type::String,
        ast::TypeKind::Tuple(ts) => Type::Tuple(ts.iter().map(lower_type).collect()),
        ast::TypeKind::Tensor(n, e) => Type::tensor(*n, lower_type(e)),
        ast::TypeKind::Lam(a, b) => Type::lam(lower_type(a), lower_type(b)),
        ast::TypeKind::LM(a, b) => Type::lm(lower_type(a), lower_type(b)),
    }
}

pub fn lower_fun_name(n: &ast::FunName) -> FunName {
    match &n.kind {
        ast::FunNameKind::Base { name, base_ty } => {
            FunName { derivs: Vec::new(), base: name.text.clone(), base_ty: base_ty.as_ref().map(lower_type) }
        }
        ast::FunNameKind::Derived { derivation, inner } => lower_fun_name(inner).derived(*derivation),
    }
}

/// A call's callee: a primitive if the name is a plain primitive name.
fn lower_callee(n: &ast::FunName) -> Callee {
    if let ast::FunNameKind::Base { name, base_ty: None } = &n.kind {
        if let Some(p) = Prim::from_name(&name.text) {
            return Callee::Prim(p);
        }
    }
    Callee::Fun(lower_fun_name(n))
}

fn lower_expr(body: &mut Body, spans: &mut DeclSpans, e: &ast::Expr) -> ExprId {
    let expr = match &e.kind {
        ast::ExprKind::Lit(l) => Expr::Lit(match l {
            ast::Literal::Integer(i) => Lit::Integer(*i),
            ast::Literal::Float(f) => Lit::Float(*f),
            ast::Literal::Bool(b) => Lit::Bool(*b),
            ast::Literal::String(s) => Lit::String(s.clone()),
        }),
        ast::ExprKind::Var(v) => Expr::Var(v.text.clone()),
        ast::ExprKind::Call { fun, args } => {
            let arg = if args.len() == 1 {
                lower_expr(body, spans, &args[0])
            } else {
                let parts = args.iter().map(|a| lower_expr(body, spans, a)).collect();
                let id = body.alloc(Expr::Tuple(parts));
                spans.exprs.insert(id, e.span);
                id
            };
            Expr::Call(lower_callee(fun), arg)
        }
        ast::ExprKind::Tuple(es) => Expr::Tuple(es.iter().map(|a| lower_expr(body, spans, a)).collect()),
        ast::ExprKind::Let { bindings, body: b } => {
            // Nested right to left; each binding's expression spans from the
            // binding to the end of the whole let.
            let mut inner = lower_expr(body, spans, b);
            let rhss: Vec<ExprId> = bindings.iter().map(|bd| lower_expr(body, spans, &bd.rhs)).collect();
            for (i, (bd, rhs)) in bindings.iter().zip(rhss).enumerate().rev() {
                let pat = match &bd.pat {
                    ast::Pattern::Var(v) => Pat::Var(v.text.clone()),
                    ast::Pattern::Tuple(vs, _) => Pat::Tuple(vs.iter().map(|v| v.text.clone()).collect()),
                };
                let id = body.alloc(Expr::Let(pat, rhs, inner));
                let span = if i == 0 { e.span } else { Span { start: bd.span.start, end: e.span.end } };
                spans.exprs.insert(id, span);
                inner = id;
            }
            return inner;
        }
        ast::ExprKind::If { cond, then_branch, else_branch } => Expr::If(
            lower_expr(body, spans, cond),
            lower_expr(body, spans, then_branch),
            lower_expr(body, spans, else_branch),
        ),
        ast::ExprKind::Assert { cond, body: b } => {
            Expr::Assert(lower_expr(body, spans, cond), lower_expr(body, spans, b), None)
        }
        ast::ExprKind::Lam { param, body: b } => {
            Expr::Lam(param.name.text.clone(), lower_type(&param.ty), lower_expr(body, spans, b))
        }
        ast::ExprKind::Dummy(t) => Expr::Dummy(lower_type(t)),
    };
    let id = body.alloc(expr);
    spans.exprs.insert(id, e.span);
    id
}
