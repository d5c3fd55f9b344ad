//! The loop IR's text format: what [`Module::pretty`] (and
//! [`Func::pretty`]) prints, parsed back, so that loop IR can be written by
//! hand (the pass file tests in `tests/filetests/`) and
//! `print(parse(print(m)))` is `print(m)`.
//!
//! One statement per line; blocks in braces, as printed. The printer
//! leaves out what it does not show, and the parser reconstructs it:
//! - variables' types (but the parameters'), from their definitions: a
//!   loop index or mark is an Integer, an allocation a tensor of its
//!   element type, a load an element, a field a component, a call its
//!   callee's result (unknown for `fn#k` without the module), a mutable
//!   variable declared without a value that of what it is assigned;
//!   `Type::Unknown` when nothing says;
//! - which variables are mutable: those `mut` declares;
//! - the tuple type of a `pack` and the type of a `print` (from the
//!   operands), a tape push's element type (its value's);
//! - what is not printed at all: the operands of an error (so a check
//!   keeps nothing alive through them), the site of a `+=`, and the site
//!   of `ineg.checked` (taken as checked, so it may fail); a function's
//!   structured name (its C name, plain), the module's site table and
//!   `main`.
//!
//! Callees are named by C name (the module's functions) or `fn#k`
//! (`FuncId(k)`, as a function printed alone shows them). Lines that are
//! empty or start with `;` are skipped.

use std::fmt;

use ksc_ir::{FunName, Type};
use rustc_hash::FxHashMap;

use crate::ir::*;
use crate::visit::{walk, walk_mut};

/// Where and why the text is not loop IR.
#[derive(Clone, Debug, PartialEq)]
pub struct ParseError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

type R<T> = Result<T, ParseError>;

/// Parses a module as [`Module::pretty`] prints it.
pub fn parse_module(text: &str) -> R<Module> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with(';'))
        .collect();
    // The functions' C names and result types first: calls may name
    // functions defined later.
    let mut heads: Vec<(String, Type)> = Vec::new();
    for &(n, l) in &lines {
        if l.starts_with("fn ") {
            let h = header(&tokens(l, n)?, n)?;
            heads.push((h.name, h.ret));
        }
    }
    let mut p = Parser { lines, at: 0, heads, vars: Vars::default() };
    let mut funcs = Vec::new();
    while p.at < p.lines.len() {
        funcs.push(p.func()?);
    }
    Ok(Module { funcs, ..Module::default() })
}

/// A token of a line.
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// `%N` or `%N:name`.
    Var(u32, Option<String>),
    /// `@N`.
    Site(u32),
    Num(String),
    Str(String),
    Word(String),
    Punct(&'static str),
}

fn err<T>(line: usize, message: impl Into<String>) -> R<T> {
    Err(ParseError { line, message: message.into() })
}

fn word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '#' | '-')
}

fn tokens(l: &str, line: usize) -> R<Vec<Tok>> {
    let cs: Vec<char> = l.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let s = *i;
        while *i < cs.len() && cs[*i].is_ascii_digit() {
            *i += 1;
        }
        cs[s..*i].iter().collect::<String>()
    };
    while i < cs.len() {
        let c = cs[i];
        let next = cs.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '%' || c == '@' {
            i += 1;
            let d = digits(&mut i);
            let Ok(k) = d.parse::<u32>() else { return err(line, format!("a number after `{c}`")) };
            if c == '@' {
                out.push(Tok::Site(k));
                continue;
            }
            let mut name = None;
            if cs.get(i) == Some(&':') && cs.get(i + 1).is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_') {
                let s = i + 1;
                i += 1;
                while i < cs.len() && (cs[i].is_ascii_alphanumeric() || cs[i] == '_') {
                    i += 1;
                }
                name = Some(cs[s..i].iter().collect());
            }
            out.push(Tok::Var(k, name));
        } else if c.is_ascii_digit() || (c == '-' && next.is_some_and(|d| d.is_ascii_digit() || d == 'i')) {
            let s = i;
            i += 1;
            while i < cs.len()
                && (cs[i].is_ascii_alphanumeric() || cs[i] == '.' || (matches!(cs[i], '-' | '+') && cs[i - 1] == 'e'))
            {
                i += 1;
            }
            out.push(Tok::Num(cs[s..i].iter().collect()));
        } else if c == '"' {
            i += 1;
            let mut s = String::new();
            loop {
                match cs.get(i) {
                    None => return err(line, "an unterminated string"),
                    Some('"') => break,
                    Some('\\') => {
                        let e = cs.get(i + 1).copied();
                        i += 2;
                        match e {
                            Some('n') => s.push('\n'),
                            Some('t') => s.push('\t'),
                            Some('r') => s.push('\r'),
                            Some('0') => s.push('\0'),
                            Some('u') => {
                                // \u{XXXX}
                                let close = (i..cs.len()).find(|&j| cs[j] == '}');
                                let code: String = cs[i + 1..close.unwrap_or(i + 1)].iter().collect();
                                let ch = u32::from_str_radix(&code, 16).ok().and_then(char::from_u32);
                                let (Some(close), Some(ch)) = (close, ch) else {
                                    return err(line, "a bad \\u escape");
                                };
                                s.push(ch);
                                i = close + 1;
                            }
                            Some(c) => s.push(c),
                            None => return err(line, "an unterminated string"),
                        }
                    }
                    Some(c) => {
                        s.push(*c);
                        i += 1;
                    }
                }
            }
            i += 1;
            out.push(Tok::Str(s));
        } else if c.is_ascii_alphabetic() || c == '_' || c == '$' {
            let s = i;
            while i < cs.len() && word_char(cs[i]) {
                i += 1;
            }
            out.push(Tok::Word(cs[s..i].iter().collect()));
        } else {
            let two: String = cs[i..(i + 2).min(cs.len())].iter().collect();
            let p = match two.as_str() {
                ":=" => Some(":="),
                "+=" => Some("+="),
                "<-" => Some("<-"),
                "->" => Some("->"),
                _ => None,
            };
            if let Some(p) = p {
                out.push(Tok::Punct(p));
                i += 2;
                continue;
            }
            let p = match c {
                '(' => "(",
                ')' => ")",
                '[' => "[",
                ']' => "]",
                '{' => "{",
                '}' => "}",
                ',' => ",",
                '=' => "=",
                '<' => "<",
                '>' => ">",
                ':' => ":",
                '.' => ".",
                _ => return err(line, format!("unexpected `{c}`")),
            };
            out.push(Tok::Punct(p));
            i += 1;
        }
    }
    Ok(out)
}

/// A cursor over the tokens of one line.
struct Toks {
    t: Vec<Tok>,
    at: usize,
    line: usize,
}

impl Toks {
    fn new(l: &str, line: usize) -> R<Toks> {
        Ok(Toks { t: tokens(l, line)?, at: 0, line })
    }

    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.at)
    }

    fn next(&mut self) -> R<Tok> {
        let t = self.t.get(self.at).cloned();
        self.at += 1;
        t.map_or_else(|| err(self.line, "the line ends early"), Ok)
    }

    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p) || matches!(self.peek(), Some(Tok::Word(w)) if w == p)
    }

    fn eat(&mut self, p: &str) -> bool {
        let yes = self.is(p);
        if yes {
            self.at += 1;
        }
        yes
    }

    fn expect(&mut self, p: &str) -> R<()> {
        if self.eat(p) {
            Ok(())
        } else {
            err(self.line, format!("expected `{p}`, found {:?}", self.peek()))
        }
    }

    fn end(&self) -> R<()> {
        match self.peek() {
            None => Ok(()),
            Some(t) => err(self.line, format!("unexpected {t:?} at the end of the line")),
        }
    }

    fn var(&mut self) -> R<(VarId, Option<String>)> {
        match self.next()? {
            Tok::Var(k, name) => Ok((VarId(k), name)),
            t => err(self.line, format!("expected a variable, found {t:?}")),
        }
    }

    fn site(&mut self) -> R<SiteId> {
        match self.next()? {
            Tok::Site(k) => Ok(SiteId(k)),
            t => err(self.line, format!("expected a site, found {t:?}")),
        }
    }

    fn usize(&mut self) -> R<usize> {
        match self.next()? {
            Tok::Num(n) => n.parse().or_else(|_| err(self.line, format!("`{n}` is not a count"))),
            t => err(self.line, format!("expected a number, found {t:?}")),
        }
    }

    fn op(&mut self) -> R<Op> {
        let line = self.line;
        let float = |n: &str| n.parse::<f64>().map(Op::Float).or_else(|_| err(line, format!("`{n}` is not a number")));
        match self.next()? {
            Tok::Var(k, None) => Ok(Op::Var(VarId(k))),
            Tok::Num(n) if n.contains(['.', 'e', 'E', 'i', 'N']) => float(&n),
            Tok::Num(n) => n.parse().map(Op::Int).or_else(|_| err(line, format!("`{n}` is not a number"))),
            Tok::Str(s) => Ok(Op::Str(s)),
            Tok::Word(w) if w == "true" || w == "false" => Ok(Op::Bool(w == "true")),
            Tok::Word(w) if w == "inf" || w == "NaN" => float(&w),
            Tok::Punct("(") => self.expect(")").map(|_| Op::Unit),
            t => err(line, format!("expected an operand, found {t:?}")),
        }
    }

    /// `a, b, ..` up to (and without) `close`.
    fn ops_until(&mut self, close: &str) -> R<Vec<Op>> {
        let mut out = Vec::new();
        if self.is(close) {
            return Ok(out);
        }
        loop {
            out.push(self.op()?);
            if !self.eat(",") {
                return Ok(out);
            }
        }
    }

    /// `(a, b, ..)`.
    fn op_list(&mut self) -> R<Vec<Op>> {
        self.expect("(")?;
        let out = self.ops_until(")")?;
        self.expect(")")?;
        Ok(out)
    }

    fn ty(&mut self) -> R<Type> {
        match self.next()? {
            Tok::Word(w) => match w.as_str() {
                "Bool" => Ok(Type::Bool),
                "Integer" => Ok(Type::Integer),
                "Float" => Ok(Type::Float),
                "String" => Ok(Type::String),
                "UNKNOWN" => Ok(Type::Unknown),
                _ => err(self.line, format!("`{w}` is not a type")),
            },
            Tok::Punct("(") => {
                let t = match self.next()? {
                    Tok::Word(w) if w == "Tuple" => {
                        let mut ts = Vec::new();
                        while !self.is(")") {
                            ts.push(self.ty()?);
                        }
                        Type::Tuple(ts)
                    }
                    Tok::Word(w) if w == "Vec" => Type::Tensor(1, Box::new(self.ty()?)),
                    Tok::Word(w) if w == "Tensor" => {
                        let n = self.usize()?;
                        Type::Tensor(n, Box::new(self.ty()?))
                    }
                    Tok::Word(w) if w == "Lam" => Type::Lam(Box::new(self.ty()?), Box::new(self.ty()?)),
                    Tok::Word(w) if w == "LM" => Type::LM(Box::new(self.ty()?), Box::new(self.ty()?)),
                    t => return err(self.line, format!("expected a type constructor, found {t:?}")),
                };
                self.expect(")")?;
                Ok(t)
            }
            t => err(self.line, format!("expected a type, found {t:?}")),
        }
    }
}

/// A function's first line.
struct Header {
    name: String,
    params: Vec<(VarId, Option<String>, Type)>,
    ret: Type,
    loops: bool,
    external: bool,
    entry_mark: Option<(VarId, Option<String>)>,
}

fn header(t: &[Tok], line: usize) -> R<Header> {
    let mut t = Toks { t: t.to_vec(), at: 0, line };
    t.expect("fn")?;
    let name = match t.next()? {
        Tok::Word(w) => w,
        tok => return err(line, format!("expected a function's name, found {tok:?}")),
    };
    t.expect("(")?;
    let mut params = Vec::new();
    while !t.is(")") {
        let (v, n) = t.var()?;
        t.expect(":")?;
        params.push((v, n, t.ty()?));
        if !t.eat(",") {
            break;
        }
    }
    t.expect(")")?;
    t.expect("->")?;
    let ret = t.ty()?;
    let external = t.eat("external");
    let loops = t.eat("loops");
    let entry_mark = if t.eat("entry-mark") { Some(t.var()?) } else { None };
    t.expect("{")?;
    t.end()?;
    Ok(Header { name, params, ret, external, loops, entry_mark })
}

/// What the text says of a function's variables.
#[derive(Default)]
struct Vars {
    names: FxHashMap<VarId, String>,
    /// Types given (parameters) or certain (indices, marks).
    known: FxHashMap<VarId, Type>,
    mutable: Vec<VarId>,
    max: Option<u32>,
}

impl Vars {
    fn def(&mut self, (v, name): (VarId, Option<String>)) -> VarId {
        if let Some(n) = name {
            self.names.insert(v, n);
        }
        self.see(v);
        v
    }

    fn see(&mut self, v: VarId) {
        self.max = Some(self.max.map_or(v.0, |m| m.max(v.0)));
    }
}

/// How a block ended.
enum Close {
    Brace,
    Else,
}

struct Parser<'t> {
    lines: Vec<(usize, &'t str)>,
    at: usize,
    /// Every function's C name and result type, in order.
    heads: Vec<(String, Type)>,
    vars: Vars,
}

impl Parser<'_> {
    fn func(&mut self) -> R<Func> {
        let (n, l) = self.lines[self.at];
        self.at += 1;
        let h = header(&tokens(l, n)?, n)?;
        self.vars = Vars::default();
        let mut params = Vec::new();
        for (v, name, ty) in h.params {
            params.push(self.vars.def((v, name)));
            self.vars.known.insert(v, ty);
        }
        let entry_mark = h.entry_mark.map(|m| self.vars.def(m));
        if let Some(m) = entry_mark {
            self.vars.known.insert(m, Type::Integer);
        }
        let (body, close) = self.block()?;
        if !matches!(close, Close::Brace) {
            return err(n, "a function's body ends in `} else {`");
        }
        let mut f = Func {
            name: FunName::plain(h.name.clone()),
            c_name: h.name,
            params,
            ret: h.ret,
            vars: Vec::new(),
            body,
            loops: h.loops,
            entry_mark,
            external: h.external,
        };
        self.types(&mut f);
        Ok(f)
    }

    /// Statements up to the `}` (or `} else {`) that ends their block.
    fn block(&mut self) -> R<(Block, Close)> {
        let mut out = Vec::new();
        loop {
            let Some(&(n, l)) = self.lines.get(self.at) else {
                let last = self.lines.last().map_or(0, |(n, _)| *n);
                return err(last, "a block is not closed");
            };
            self.at += 1;
            match l {
                "}" => return Ok((out, Close::Brace)),
                "} else {" => return Ok((out, Close::Else)),
                _ => out.push(self.stmt(l, n)?),
            }
        }
    }

    /// A block that must end in `}`.
    fn closed(&mut self, line: usize) -> R<Block> {
        match self.block()? {
            (b, Close::Brace) => Ok(b),
            (_, Close::Else) => err(line, "`else` of something not an `if`"),
        }
    }

    fn stmt(&mut self, l: &str, n: usize) -> R<Stmt> {
        if let Some(rest) = l.strip_prefix("check ") {
            let (cond, rest) = rest.split_once(" @").map_or_else(|| err(n, "a check without a site"), Ok)?;
            let mut t = Toks::new(cond, n)?;
            let cond = t.op()?;
            t.end()?;
            let (site, e) = site_and_error(rest, n)?;
            self.see_op(&cond);
            return Ok(Stmt::Check { cond, site, err: e });
        }
        if let Some(rest) = l.strip_prefix("fail @") {
            let (site, e) = site_and_error(rest, n)?;
            return Ok(Stmt::Fail { site, err: e });
        }
        let mut t = Toks::new(l, n)?;
        let s = match t.peek().cloned() {
            Some(Tok::Word(w)) => {
                t.at += 1;
                match w.as_str() {
                    "mut" => {
                        let v = self.vars.def(t.var()?);
                        self.vars.mutable.push(v);
                        let init = if t.eat("=") { Some(t.op()?) } else { None };
                        Stmt::DeclMut(v, init)
                    }
                    "for" => {
                        let idx = self.vars.def(t.var()?);
                        self.vars.known.insert(idx, Type::Integer);
                        t.expect("<")?;
                        let bound = t.op()?;
                        let reset = t.eat("reset-each-iteration");
                        t.expect("{")?;
                        t.end()?;
                        let body = self.closed(n)?;
                        Stmt::For { idx, n: bound, pre: Vec::new(), body, reset }
                    }
                    "if" => {
                        let cond = t.op()?;
                        if t.eat(">") {
                            // `if n > 0 (hoisted) { pre }` before its loop.
                            if t.op()? != Op::Int(0) {
                                return err(n, "a hoisted preheader tests `> 0`");
                            }
                            t.expect("(")?;
                            t.expect("hoisted")?;
                            t.expect(")")?;
                            t.expect("{")?;
                            t.end()?;
                            let pre = self.closed(n)?;
                            let Some(&(fl, fline)) = self.lines.get(self.at) else {
                                return err(n, "a hoisted preheader without its loop");
                            };
                            self.at += 1;
                            let Stmt::For { idx, n: bound, body, reset, .. } = self.stmt(fline, fl)? else {
                                return err(fl, "a hoisted preheader is followed by its loop");
                            };
                            if bound != cond {
                                return err(fl, "the loop's size is not its preheader's");
                            }
                            t.end()?;
                            return Ok(Stmt::For { idx, n: bound, pre, body, reset });
                        }
                        t.expect("{")?;
                        t.end()?;
                        let (then, close) = self.block()?;
                        let els = match close {
                            Close::Brace => Vec::new(),
                            Close::Else => self.closed(n)?,
                        };
                        Stmt::If { cond, then, els }
                    }
                    "store" => {
                        let arr = t.op()?;
                        t.expect("[")?;
                        let idx = t.op()?;
                        t.expect("]")?;
                        t.expect("=")?;
                        Stmt::Store { arr, idx, val: t.op()? }
                    }
                    "print" => Stmt::Print { val: t.op()?, ty: Type::Unknown },
                    "copydown" => {
                        let (mark, _) = t.var()?;
                        t.expect("<-")?;
                        let mut vars = Vec::new();
                        while t.peek().is_some() {
                            vars.push(t.var()?.0);
                            if !t.eat(",") {
                                break;
                            }
                        }
                        Stmt::CopyDown { mark, vars }
                    }
                    "reset" => Stmt::Reset(t.var()?.0),
                    "return" => Stmt::Return(t.op()?),
                    "tailcall" => Stmt::TailCall(t.op_list()?),
                    "keep" => Stmt::Keep(t.op_list()?),
                    _ => return err(n, format!("`{w}` does not start a statement")),
                }
            }
            Some(Tok::Var(_, _)) => {
                let at = t.at;
                let (v, name) = t.var()?;
                if t.eat(":=") {
                    if name.is_some() {
                        return err(n, "an assignment names its variable");
                    }
                    Stmt::Set(v, t.op()?)
                } else if t.eat("=") {
                    let v = self.vars.def((v, name));
                    Stmt::Let(v, self.rhs(&mut t)?)
                } else {
                    // `arr[idx] += val`
                    t.at = at;
                    let arr = t.op()?;
                    t.expect("[")?;
                    let idx = t.op()?;
                    t.expect("]")?;
                    t.expect("+=")?;
                    Stmt::Accum { arr, idx, val: t.op()?, site: SiteId::UNCHECKED }
                }
            }
            _ => return err(n, "not a statement"),
        };
        t.end()?;
        crate::visit::stmt_operands(&s).into_iter().for_each(|o| self.see_op(o));
        match &s {
            Stmt::Set(v, _) | Stmt::Reset(v) => self.vars.see(*v),
            Stmt::CopyDown { mark, vars } => {
                for v in std::iter::once(mark).chain(vars) {
                    self.vars.see(*v);
                }
            }
            _ => {}
        }
        Ok(s)
    }

    fn see_op(&mut self, o: &Op) {
        if let Op::Var(v) = o {
            self.vars.see(*v);
        }
    }

    fn rhs(&mut self, t: &mut Toks) -> R<Rhs> {
        let Some(Tok::Word(w)) = t.peek().cloned() else { return Ok(Rhs::Copy(t.op()?)) };
        let line = t.line;
        if matches!(w.as_str(), "true" | "false" | "inf" | "NaN") {
            return Ok(Rhs::Copy(t.op()?));
        }
        t.at += 1;
        let two = |t: &mut Toks| -> R<(Op, Op)> {
            let a = t.op()?;
            t.expect(",")?;
            Ok((a, t.op()?))
        };
        if let Some(op) = un_op(&w) {
            let site = (op == UnOp::INeg).then_some(SiteId(0));
            return Ok(Rhs::Un(op, t.op()?, site));
        }
        if let Some(op) = w.strip_suffix(".checked").and_then(i_op) {
            let (a, b) = two(t)?;
            return Ok(Rhs::IChecked(op, a, b, t.site()?));
        }
        if let Some(op) = bin_op(&w) {
            let (a, b) = two(t)?;
            return Ok(Rhs::Bin(op, a, b));
        }
        Ok(match w.as_str() {
            "select" => {
                let c = t.op()?;
                t.expect(",")?;
                let (a, b) = two(t)?;
                Rhs::Select(c, a, b)
            }
            "call" => {
                let name = match t.next()? {
                    Tok::Word(n) => n,
                    tok => return err(line, format!("expected a callee, found {tok:?}")),
                };
                let func = match name.strip_prefix("fn#") {
                    Some(k) => k.parse().map(FuncId).or_else(|_| err(line, format!("`{name}` is not a function")))?,
                    None => match self.heads.iter().position(|(c, _)| *c == name) {
                        Some(k) => FuncId(k as u32),
                        None => return err(line, format!("no function `{name}` in the module")),
                    },
                };
                let args = t.op_list()?;
                let frame = if t.peek().is_some() { Some(t.site()?) } else { None };
                Rhs::Call { func, args, frame }
            }
            "alloc" => {
                t.expect("[")?;
                let dims = t.ops_until("]")?;
                t.expect("]")?;
                t.expect("of")?;
                let elem = t.ty()?;
                if t.eat("in") {
                    Rhs::Reuse { dead: t.op()?, dims, elem }
                } else {
                    Rhs::Alloc { dims, elem }
                }
            }
            "load" => {
                let arr = t.op()?;
                t.expect("[")?;
                let idx = t.op()?;
                t.expect("]")?;
                Rhs::Load { arr, idx }
            }
            "dim" | "field" => {
                let a = t.op()?;
                t.expect(".")?;
                let k = t.usize()?;
                if w == "dim" {
                    Rhs::Dim { arr: a, dim: k }
                } else {
                    Rhs::Field(a, k)
                }
            }
            "pack" => Rhs::Pack(t.op_list()?, Type::Unknown),
            "deepcopy" => Rhs::DeepCopy(t.op()?),
            "mark" => Rhs::Mark,
            "tape_push" => {
                let (tape, val) = two(t)?;
                Rhs::TapePush { tape, val, elem: Type::Unknown }
            }
            _ => return err(line, format!("`{w}` is not an operation")),
        })
    }

    /// The variables' table of `f`, with the types its definitions give
    /// them, and the types `pack`, `print` and `tape_push` record.
    fn types(&self, f: &mut Func) {
        let vars = &self.vars;
        let count = vars.max.map_or(0, |m| m as usize + 1);
        let mut tys: Vec<Option<Type>> = (0..count).map(|k| vars.known.get(&VarId(k as u32)).cloned()).collect();
        let op_ty = |tys: &[Option<Type>], o: &Op| -> Option<Type> {
            match o {
                Op::Var(v) => tys[v.0 as usize].clone(),
                Op::Float(_) => Some(Type::Float),
                Op::Int(_) => Some(Type::Integer),
                Op::Bool(_) => Some(Type::Bool),
                Op::Str(_) => Some(Type::String),
                Op::Unit => Some(Type::unit()),
            }
        };
        // To a fixed point: a mutable variable may be read before the
        // statement that says its type.
        loop {
            let mut changed = false;
            walk(&f.body, &mut |s| {
                let (v, t) = match s {
                    Stmt::Let(v, r) => (*v, rhs_ty(r, &|o| op_ty(&tys, o), &self.heads)),
                    Stmt::DeclMut(v, Some(o)) | Stmt::Set(v, o) => (*v, op_ty(&tys, o)),
                    _ => return,
                };
                if tys[v.0 as usize].is_none() && t.is_some() {
                    tys[v.0 as usize] = t;
                    changed = true;
                }
            });
            if !changed {
                break;
            }
        }
        walk_mut(&mut f.body, &mut |s| match s {
            Stmt::Let(_, Rhs::Pack(ops, ty)) => {
                let ts: Option<Vec<Type>> = ops.iter().map(|o| op_ty(&tys, o)).collect();
                *ty = ts.map_or(Type::Unknown, Type::Tuple);
            }
            Stmt::Let(_, Rhs::TapePush { val, elem, .. }) => *elem = op_ty(&tys, val).unwrap_or(Type::Unknown),
            Stmt::Print { val, ty } => *ty = op_ty(&tys, val).unwrap_or(Type::Unknown),
            _ => {}
        });
        f.vars = tys
            .into_iter()
            .enumerate()
            .map(|(k, ty)| {
                let v = VarId(k as u32);
                VarInfo {
                    ty: ty.unwrap_or(Type::Unknown),
                    name: vars.names.get(&v).cloned(),
                    mutable: vars.mutable.contains(&v),
                }
            })
            .collect();
    }
}

/// The type of a right-hand side, from its operands' (`ty`) and the
/// module's functions' results.
fn rhs_ty(r: &Rhs, ty: &dyn Fn(&Op) -> Option<Type>, heads: &[(String, Type)]) -> Option<Type> {
    Some(match r {
        Rhs::Copy(o) | Rhs::DeepCopy(o) => return ty(o),
        Rhs::Un(op, ..) => match op {
            UnOp::INeg => Type::Integer,
            UnOp::Not => Type::Bool,
            _ => Type::Float,
        },
        Rhs::Bin(op, ..) => match op {
            BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FMax | BinOp::FPowI => Type::Float,
            BinOp::IAddNoCheck | BinOp::IMulNoCheck | BinOp::IMulSat => Type::Integer,
            _ => Type::Bool,
        },
        Rhs::IChecked(..) | Rhs::Dim { .. } | Rhs::Mark => Type::Integer,
        Rhs::Select(_, a, b) => return ty(a).or_else(|| ty(b)),
        Rhs::Call { func, .. } => return heads.get(func.0 as usize).map(|(_, t)| t.clone()),
        Rhs::Alloc { dims, elem } | Rhs::Reuse { dims, elem, .. } => Type::Tensor(dims.len(), Box::new(elem.clone())),
        Rhs::Load { arr, .. } => match ty(arr)? {
            Type::Tensor(_, e) => *e,
            _ => return None,
        },
        Rhs::Field(o, k) => match ty(o)? {
            Type::Tuple(ts) => return ts.get(*k).cloned(),
            _ => return None,
        },
        Rhs::Pack(ops, _) => Type::Tuple(ops.iter().map(ty).collect::<Option<_>>()?),
        Rhs::TapePush { tape, .. } => return ty(tape),
    })
}

/// `@S ERR` (the text after a check's condition or `fail`, without `@`).
fn site_and_error(rest: &str, n: usize) -> R<(SiteId, ErrorKind)> {
    let (site, e) = rest.split_once(' ').unwrap_or((rest, ""));
    let Ok(site) = site.parse::<u32>() else { return err(n, format!("`@{site}` is not a site")) };
    Ok((SiteId(site), error_kind(e, n)?))
}

/// An error as `err_name` prints it (without its operands).
fn error_kind(e: &str, n: usize) -> R<ErrorKind> {
    let arg = |prefix: &str| e.strip_prefix(prefix).and_then(|r| r.strip_suffix(')')).map(str::to_string);
    Ok(match e {
        "assert" => ErrorKind::Assert,
        "index-out-of-range" => ErrorKind::IndexOutOfRange { index: Vec::new(), size: Vec::new() },
        "sumbuild-empty" => ErrorKind::SumbuildEmpty { size: Vec::new() },
        "diag" => ErrorKind::Diag { rows: Op::Unit, cols: Op::Unit },
        "matvec" => ErrorKind::MatVec { rows: Op::Unit, cols: Op::Unit, n: Op::Unit },
        _ if e.starts_with('"') => match Toks::new(e, n)?.next()? {
            Tok::Str(s) => ErrorKind::Message(s),
            _ => return err(n, "a message is a string"),
        },
        _ => {
            if let Some(prim) = arg("negative-size(") {
                ErrorKind::NegativeSize { prim, size: Vec::new() }
            } else if let Some(prim) = arg("too-large(") {
                ErrorKind::TooLarge { prim, size: Vec::new(), limit: 0 }
            } else if let Some(what) = arg("sizes(") {
                ErrorKind::Sizes { what, a: Vec::new(), b: Vec::new() }
            } else {
                return err(n, format!("`{e}` is not an error"));
            }
        }
    })
}

fn un_op(w: &str) -> Option<UnOp> {
    Some(match w {
        "fneg" => UnOp::FNeg,
        "ineg.checked" => UnOp::INeg,
        "not" => UnOp::Not,
        "to_float" => UnOp::ToFloat,
        "bool_to_float" => UnOp::BoolToFloat,
        "ranhashdoub" => UnOp::RanHashDoub,
        _ => {
            return MathFn::ALL.into_iter().find(|m| m.c_name().trim_start_matches("ksrt_") == w).map(UnOp::Math);
        }
    })
}

fn i_op(w: &str) -> Option<IOp> {
    Some(match w {
        "iadd" => IOp::Add,
        "isub" => IOp::Sub,
        "imul" => IOp::Mul,
        "idiv" => IOp::Div,
        _ => return None,
    })
}

fn bin_op(w: &str) -> Option<BinOp> {
    Some(match w {
        "fadd" => BinOp::FAdd,
        "fsub" => BinOp::FSub,
        "fmul" => BinOp::FMul,
        "fdiv" => BinOp::FDiv,
        "fmax" => BinOp::FMax,
        "fpowi" => BinOp::FPowI,
        "flt" => BinOp::FLt,
        "fle" => BinOp::FLe,
        "fgt" => BinOp::FGt,
        "fge" => BinOp::FGe,
        "feq" => BinOp::FEq,
        "ilt" => BinOp::ILt,
        "ile" => BinOp::ILe,
        "igt" => BinOp::IGt,
        "ige" => BinOp::IGe,
        "ieq" => BinOp::IEq,
        "beq" => BinOp::BEq,
        "seq" => BinOp::SEq,
        "and" => BinOp::And,
        "or" => BinOp::Or,
        "iadd" => BinOp::IAddNoCheck,
        "imul" => BinOp::IMulNoCheck,
        "imul.sat" => BinOp::IMulSat,
        _ => return None,
    })
}
