//! The lexer and S-expression reader for `.ks` text.
//!
//! [`read_sexprs`] turns text into a forest of [`SExpr`]s, each with the byte
//! [`Span`] of its text, together with every lexical and bracket error it
//! found. It never stops at the first error and never panics:
//!
//! * A malformed token (a malformed number, an integer that does not fit in
//!   64 bits, a bad string literal, a name containing a character that is not
//!   allowed) is reported and kept as an [`Atom::Invalid`] placeholder, so that
//!   the list around it keeps its shape and the parser can stay silent about it.
//! * A run of characters that are all not allowed (say a lone `{`, or a
//!   non-breaking space between two tokens) is reported and skipped.
//! * A stray closing bracket is reported and skipped. A list closed by the
//!   wrong bracket (`( ... ]`) is reported and closed anyway. A list that is
//!   never closed is reported at its opening bracket. If such an unclosed list
//!   contains a `(` at the very start of a line, that `(` is taken to start the
//!   next top-level form (the usual layout of `.ks` files), so a single
//!   missing `)` does not swallow the rest of the file. Lists whose end was
//!   guessed this way are marked by their [`SExprKind::List::closed_by`].
//! * Lists nested deeper than [`MAX_DEPTH`] are reported and replaced by an
//!   [`Atom::Invalid`], so no later recursive pass can overflow its stack.

use crate::{Span, SyntaxError};

/// The deepest bracket nesting the reader accepts. Deeper lists are reported
/// and replaced by an [`Atom::Invalid`].
pub const MAX_DEPTH: usize = 1000;

/// How many times the reader re-reads the rest of a file to recover from an
/// unclosed list (bounds the work on pathological inputs to a small multiple
/// of the text length).
const MAX_RECOVERY_ROUNDS: usize = 32;

/// The two kinds of brackets: `( )` and `[ ]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bracket {
    /// `( ... )`
    Paren,
    /// `[ ... ]`
    Square,
}

impl Bracket {
    pub fn open_char(self) -> char {
        match self {
            Bracket::Paren => '(',
            Bracket::Square => '[',
        }
    }
    pub fn close_char(self) -> char {
        match self {
            Bracket::Paren => ')',
            Bracket::Square => ']',
        }
    }
}

/// An atom: a single token that is not a bracket.
#[derive(Clone, Debug, PartialEq)]
pub enum Atom {
    Integer(i64),
    Float(f64),
    /// A string literal, escapes decoded.
    String(String),
    /// Any other token made of identifier characters (`x`, `get$1$2`, `:`, `-`).
    Symbol(String),
    /// A token that could not be read; an error has been reported for it.
    Invalid,
}

/// An S-expression with the byte span of its text.
#[derive(Clone, Debug, PartialEq)]
pub struct SExpr {
    pub kind: SExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SExprKind {
    Atom(Atom),
    List {
        bracket: Bracket,
        items: Vec<SExpr>,
        /// The bracket that closed the list: `Some(bracket)` normally, the other
        /// bracket if it was closed by the wrong one, `None` if it was never
        /// closed. In the last two cases an error has been reported and the end
        /// of the list is the reader's guess.
        closed_by: Option<Bracket>,
    },
}

impl SExpr {
    /// The symbol's text, if this is a symbol.
    pub fn as_symbol(&self) -> Option<&str> {
        match &self.kind {
            SExprKind::Atom(Atom::Symbol(s)) => Some(s),
            _ => None,
        }
    }

    /// Whether this is the symbol `s`.
    pub fn is_symbol(&self, s: &str) -> bool {
        self.as_symbol() == Some(s)
    }

    /// The bracket and items, if this is a list.
    pub fn as_list(&self) -> Option<(Bracket, &[SExpr])> {
        match &self.kind {
            SExprKind::List { bracket, items, .. } => Some((*bracket, items)),
            _ => None,
        }
    }

    /// The items, if this is a list in round parentheses.
    pub fn as_paren_list(&self) -> Option<&[SExpr]> {
        match self.as_list() {
            Some((Bracket::Paren, items)) => Some(items),
            _ => None,
        }
    }

    /// Whether this is an [`Atom::Invalid`] placeholder.
    pub fn is_invalid(&self) -> bool {
        matches!(self.kind, SExprKind::Atom(Atom::Invalid))
    }

    /// Whether every list in this tree (itself included) was closed by its own
    /// bracket, i.e. the reader did not have to guess where a list ends.
    /// Iterative, so it works on trees of any depth.
    pub fn brackets_balanced(&self) -> bool {
        let mut todo = vec![self];
        while let Some(e) = todo.pop() {
            if let SExprKind::List { bracket, items, closed_by } = &e.kind {
                if *closed_by != Some(*bracket) {
                    return false;
                }
                todo.extend(items.iter());
            }
        }
        true
    }
}

/// Read all S-expressions of a text. Returns the top-level forms that could be
/// read and the errors found (sorted by position). Never panics.
pub fn read_sexprs(text: &str) -> (Vec<SExpr>, Vec<SyntaxError>) {
    if text.len() > u32::MAX as usize {
        let msg = "file too large: at most 4 GiB of text can be read";
        return (Vec::new(), vec![SyntaxError::new(Span::new(0, 0), msg)]);
    }
    let mut reader = Reader::new(text);
    let mut forms = Vec::new();
    let mut pos = if text.starts_with('\u{FEFF}') { 3 } else { 0 };
    let mut rounds = 0;
    loop {
        let mut read = reader.read_forms(pos, text.len());
        let Some(unclosed) = read.unclosed else {
            forms.append(&mut read.forms);
            break;
        };
        match unclosed.next_form {
            Some(cut) if rounds < MAX_RECOVERY_ROUNDS => {
                // The unclosed form most likely ends before the `(` that starts
                // a line inside it. Keep the forms before it, forget what was
                // read from it, read it again up to the cut, and go on from there.
                rounds += 1;
                read.forms.pop();
                forms.append(&mut read.forms);
                let start = unclosed.open.start as usize;
                reader.errors.retain(|e| (e.span.start as usize) < start);
                let mut again = reader.read_forms(start, cut);
                if let Some(u) = again.unclosed {
                    let line = line_number(text, cut);
                    reader.report_unclosed(&u, &format!("before the next top-level `(` on line {line}"));
                }
                forms.append(&mut again.forms);
                pos = cut;
            }
            _ => {
                reader.report_unclosed(&unclosed, "at the end of the file");
                forms.append(&mut read.forms);
                break;
            }
        }
    }
    let mut errors = reader.errors;
    errors.sort_by_key(|e| (e.span.start, e.span.end));
    (forms, errors)
}

/// 1-based line number of a byte offset.
fn line_number(text: &str, offset: usize) -> usize {
    let upto = text.as_bytes().get(..offset).unwrap_or(text.as_bytes());
    1 + upto.iter().filter(|&&b| b == b'\n').count()
}

/// Whitespace that separates tokens.
fn is_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{0B}' | '\u{0C}')
}

/// Characters allowed in names (and numbers): ASCII letters, digits and
/// ``_ ' : ! $ % & * + . , / < = > ? @ \ ^ | - ~``.
pub fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_':!$%&*+.,/<=>?@\\^|-~".contains(c)
}

/// How to name a character in a message.
fn describe_char(c: char) -> String {
    if c.is_control() || c.is_whitespace() || c == '\u{FEFF}' {
        format!("U+{:04X}", c as u32)
    } else {
        format!("`{c}`")
    }
}

/// A token of the lexer.
enum Tok {
    Open(Bracket),
    Close(Bracket),
    Atom(Atom),
}

struct Token {
    tok: Tok,
    span: Span,
    /// The token is the first thing on its line (column 0).
    line_start: bool,
}

/// A list being read.
struct Frame {
    bracket: Bracket,
    open: Span,
    items: Vec<SExpr>,
}

/// Result of [`Reader::read_forms`].
struct Forms {
    forms: Vec<SExpr>,
    /// Set when the last form was not closed before the end (it has then been
    /// closed by force and is the last of `forms`).
    unclosed: Option<Unclosed>,
}

struct Unclosed {
    bracket: Bracket,
    /// The opening bracket of the unclosed top-level form.
    open: Span,
    /// How many lists inside it were not closed either.
    nested: usize,
    /// The first `(` at the start of a line inside the unclosed form.
    next_form: Option<usize>,
}

struct Reader<'t> {
    text: &'t str,
    /// Current position of the lexer.
    pos: usize,
    /// The lexer stops here.
    end: usize,
    errors: Vec<SyntaxError>,
    /// Byte offsets of line starts, computed on first use.
    line_starts: Option<Vec<usize>>,
}

impl<'t> Reader<'t> {
    fn new(text: &'t str) -> Reader<'t> {
        Reader { text, pos: 0, end: text.len(), errors: Vec::new(), line_starts: None }
    }

    fn error(&mut self, start: usize, end: usize, message: impl Into<String>) -> &mut SyntaxError {
        self.errors.push(SyntaxError::new(Span::new(start, end), message));
        let last = self.errors.len() - 1;
        &mut self.errors[last]
    }

    /// 1-based line and column (in characters) of a byte offset.
    fn line_col(&mut self, offset: usize) -> (usize, usize) {
        let text = self.text;
        let starts = self
            .line_starts
            .get_or_insert_with(|| std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect());
        let line = starts.partition_point(|&s| s <= offset).max(1);
        let line_start = starts[line - 1];
        let col = text.get(line_start..offset).map_or(0, |s| s.chars().count());
        (line, col + 1)
    }

    fn report_unclosed(&mut self, u: &Unclosed, where_: &str) {
        let (open, close) = (u.bracket.open_char(), u.bracket.close_char());
        let msg = format!("unclosed `{open}`: no matching `{close}` {where_}");
        let nested = u.nested;
        let err = self.error(u.open.start as usize, u.open.end as usize, msg);
        if nested > 0 {
            let lists = if nested == 1 { "list" } else { "lists" };
            err.note = Some(format!("{nested} more {lists} opened inside it are not closed either"));
        }
    }

    // ----------------------------------------------------------------- reader

    /// Read top-level forms from `start` up to `end`.
    fn read_forms(&mut self, start: usize, end: usize) -> Forms {
        self.pos = start;
        self.end = end;
        let mut forms = Vec::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut next_form = None;
        while let Some(token) = self.next_token() {
            let start = token.span.start as usize;
            let atom = match token.tok {
                Tok::Open(bracket) => {
                    if stack.is_empty() {
                        next_form = None;
                    } else if bracket == Bracket::Paren && token.line_start && next_form.is_none() {
                        next_form = Some(start);
                    }
                    if stack.len() < MAX_DEPTH {
                        stack.push(Frame { bracket, open: token.span, items: Vec::new() });
                        continue;
                    }
                    let span = self.skip_too_deep(token.span, &mut next_form);
                    SExpr { kind: SExprKind::Atom(Atom::Invalid), span }
                }
                Tok::Close(bracket) => {
                    let Some(frame) = stack.pop() else {
                        let c = bracket.close_char();
                        let msg = format!("unexpected `{c}`: there is no open bracket for it to close");
                        self.error(start, start + 1, msg);
                        continue;
                    };
                    if frame.bracket != bracket {
                        let open_at = frame.open.start as usize;
                        let (line, col) = self.line_col(open_at);
                        let (o, c) = (frame.bracket.open_char(), bracket.close_char());
                        let expected = frame.bracket.close_char();
                        let msg = format!("mismatched brackets: `{o}` closed by `{c}`");
                        let note =
                            format!("the `{o}` opened at line {line}, column {col} should be closed by `{expected}`");
                        self.error(start, start + 1, msg).note = Some(note);
                    }
                    SExpr {
                        kind: SExprKind::List { bracket: frame.bracket, items: frame.items, closed_by: Some(bracket) },
                        span: frame.open.cover(token.span),
                    }
                }
                Tok::Atom(atom) => SExpr { kind: SExprKind::Atom(atom), span: token.span },
            };
            match stack.last_mut() {
                Some(frame) => frame.items.push(atom),
                None => forms.push(atom),
            }
        }
        // Close what is still open, innermost first.
        let mut unclosed = None;
        if let Some(outer) = stack.first() {
            unclosed = Some(Unclosed { bracket: outer.bracket, open: outer.open, nested: stack.len() - 1, next_form });
        }
        while let Some(frame) = stack.pop() {
            let end = frame.items.last().map_or(frame.open, |e| e.span);
            let list = SExpr {
                span: frame.open.cover(end),
                kind: SExprKind::List { bracket: frame.bracket, items: frame.items, closed_by: None },
            };
            match stack.last_mut() {
                Some(parent) => parent.items.push(list),
                None => forms.push(list),
            }
        }
        Forms { forms, unclosed }
    }

    /// Skip a list that opens deeper than [`MAX_DEPTH`], up to its closing
    /// bracket; returns the span of what was skipped.
    fn skip_too_deep(&mut self, open: Span, next_form: &mut Option<usize>) -> Span {
        let msg = format!("nesting deeper than {MAX_DEPTH} levels");
        self.error(open.start as usize, open.end as usize, msg).note =
            Some("this list and everything inside it is skipped".to_string());
        let mut depth = 1usize;
        let mut span = open;
        while let Some(t) = self.next_token() {
            span = span.cover(t.span);
            match t.tok {
                Tok::Open(b) => {
                    if b == Bracket::Paren && t.line_start && next_form.is_none() {
                        *next_form = Some(t.span.start as usize);
                    }
                    depth += 1;
                }
                Tok::Close(_) => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                Tok::Atom(_) => {}
            }
        }
        span
    }

    // ------------------------------------------------------------------ lexer

    fn peek_byte(&self, offset: usize) -> Option<u8> {
        let i = self.pos + offset;
        if i < self.end {
            self.text.as_bytes().get(i).copied()
        } else {
            None
        }
    }

    fn peek_char(&self) -> Option<char> {
        if self.pos < self.end {
            self.text.get(self.pos..)?.chars().next()
        } else {
            None
        }
    }

    fn at_block_comment(&self) -> bool {
        self.peek_byte(0) == Some(b'#') && self.peek_byte(1) == Some(b'|')
    }

    /// The next token, after whitespace and comments; `None` at the end.
    fn next_token(&mut self) -> Option<Token> {
        loop {
            self.skip_trivia();
            let c = self.peek_char()?;
            let start = self.pos;
            let bytes = self.text.as_bytes();
            let line_start =
                start == 0 || bytes.get(start - 1) == Some(&b'\n') || (start == 3 && self.text.starts_with('\u{FEFF}'));
            let tok = match c {
                '(' | '[' | ')' | ']' => {
                    self.pos += 1;
                    match c {
                        '(' => Tok::Open(Bracket::Paren),
                        '[' => Tok::Open(Bracket::Square),
                        ')' => Tok::Close(Bracket::Paren),
                        _ => Tok::Close(Bracket::Square),
                    }
                }
                '"' => Tok::Atom(self.string()),
                _ => match self.word() {
                    Some(atom) => Tok::Atom(atom),
                    None => continue,
                },
            };
            return Some(Token { tok, span: Span::new(start, self.pos), line_start });
        }
    }

    /// Skip whitespace, `;` line comments and nested `#| ... |#` block comments.
    fn skip_trivia(&mut self) {
        while let Some(b) = self.peek_byte(0) {
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C => self.pos += 1,
                b';' => {
                    while let Some(b) = self.peek_byte(0) {
                        if b == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                b'#' if self.peek_byte(1) == Some(b'|') => self.block_comment(),
                _ => return,
            }
        }
    }

    fn block_comment(&mut self) {
        let open = self.pos;
        self.pos += 2;
        let mut depth = 1usize;
        while let Some(b) = self.peek_byte(0) {
            if b == b'#' && self.peek_byte(1) == Some(b'|') {
                depth += 1;
                self.pos += 2;
            } else if b == b'|' && self.peek_byte(1) == Some(b'#') {
                depth -= 1;
                self.pos += 2;
                if depth == 0 {
                    return;
                }
            } else {
                self.pos += 1;
            }
        }
        // Only ASCII bytes were compared, and `end` is a char boundary.
        self.pos = self.end;
        self.error(open, open + 2, "unterminated block comment: this `#|` has no matching `|#`");
    }

    /// A maximal run of characters other than whitespace, brackets, `"`, `;`
    /// and `#|`: a number or a symbol. Returns `None` if the run consists only
    /// of characters that are not allowed (they are reported and skipped).
    fn word(&mut self) -> Option<Atom> {
        let start = self.pos;
        while let Some(c) = self.peek_char() {
            if is_whitespace(c) || matches!(c, '(' | ')' | '[' | ']' | '"' | ';') || self.at_block_comment() {
                break;
            }
            self.pos += c.len_utf8();
        }
        let end = self.pos;
        let run = &self.text[start..end];

        // Report each maximal sub-run of characters that are not allowed.
        let mut bad = false;
        let mut good = false;
        let mut chars = run.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if is_ident_char(c) {
                good = true;
                continue;
            }
            bad = true;
            let mut j = i + c.len_utf8();
            while let Some(&(k, d)) = chars.peek() {
                if is_ident_char(d) {
                    break;
                }
                j = k + d.len_utf8();
                chars.next();
            }
            let note = match c {
                '#' => Some("`#` is only used in block comments `#| ... |#`".to_string()),
                '{' | '}' => Some("use `(` and `)` for lists".to_string()),
                c if !c.is_ascii() => Some(
                    "names may contain only ASCII letters, digits and ``_ ' : ! $ % & * + . , / < = > ? @ \\ ^ | - ~``"
                        .to_string(),
                ),
                _ => None,
            };
            let msg = format!("unexpected character {}", describe_char(c));
            self.error(start + i, start + j, msg).note = note;
        }
        if bad {
            return if good { Some(Atom::Invalid) } else { None };
        }
        match classify_word(run) {
            Ok(atom) => Some(atom),
            Err((message, note)) => {
                self.error(start, end, message).note = note;
                Some(Atom::Invalid)
            }
        }
    }

    /// A string literal with Haskell escapes. The opening `"` is at `pos`.
    fn string(&mut self) -> Atom {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        let mut ok = true;
        while let Some(c) = self.peek_char() {
            match c {
                '"' => {
                    self.pos += 1;
                    return if ok { Atom::String(out) } else { Atom::Invalid };
                }
                '\n' | '\r' => break,
                '\\' => {
                    let at = self.pos;
                    match self.escape() {
                        Ok(Some('\0')) => {
                            self.nul_in_string(at, self.pos);
                            ok = false;
                        }
                        Ok(Some(c)) => out.push(c),
                        Ok(None) => {}
                        Err(()) => ok = false,
                    }
                }
                '\0' => {
                    self.nul_in_string(self.pos, self.pos + 1);
                    ok = false;
                    self.pos += 1;
                }
                c => {
                    out.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
        self.error(start, start + 1, "unterminated string literal: no closing `\"` on this line").note =
            Some("a string cannot span lines; write a newline as `\\n`".to_string());
        Atom::Invalid
    }

    /// A NUL character in a string literal is an error: native code's
    /// strings are C strings, which end at it, so `ksc run` would print less
    /// than the interpreter (found by the fuzzer, issue 38).
    fn nul_in_string(&mut self, start: usize, end: usize) {
        self.error(start, end, "a string literal cannot contain the NUL character").note =
            Some("strings are C strings in native code, which end at NUL".to_string());
    }

    /// An escape sequence; `pos` is at the backslash. Returns the character it
    /// stands for (`None` for `\&` and string gaps). Errors are reported here.
    fn escape(&mut self) -> Result<Option<char>, ()> {
        let start = self.pos;
        self.pos += 1;
        let Some(c) = self.peek_char() else {
            // End of input: the caller reports the unterminated string.
            return Ok(None);
        };
        let simple = match c {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            '\\' => Some('\\'),
            '"' => Some('"'),
            '\'' => Some('\''),
            'a' => Some('\u{07}'),
            'b' => Some('\u{08}'),
            'f' => Some('\u{0C}'),
            'v' => Some('\u{0B}'),
            _ => None,
        };
        if let Some(s) = simple {
            self.pos += 1;
            return Ok(Some(s));
        }
        match c {
            '&' => {
                self.pos += 1;
                Ok(None)
            }
            '0'..='9' => self.numeric_escape(start, 10, 0),
            'x' => self.numeric_escape(start, 16, 1),
            'o' => self.numeric_escape(start, 8, 1),
            '^' => {
                self.pos += 1;
                match self.peek_char() {
                    Some(d @ '@'..='_') => {
                        self.pos += 1;
                        Ok(char::from_u32(d as u32 - '@' as u32))
                    }
                    _ => {
                        self.error(
                            start,
                            self.pos,
                            "`\\^` must be followed by a character from `@` to `_`, e.g. `\\^A`",
                        );
                        Err(())
                    }
                }
            }
            c if is_whitespace(c) => {
                // A string gap: `\`, whitespace (possibly line breaks), `\`.
                while let Some(c) = self.peek_char() {
                    if !is_whitespace(c) {
                        break;
                    }
                    self.pos += 1;
                }
                if self.peek_byte(0) == Some(b'\\') {
                    self.pos += 1;
                    Ok(None)
                } else {
                    self.error(start, self.pos, "unterminated string gap: expected `\\` after the whitespace").note =
                        Some("a backslash followed by whitespace starts a gap `\\   \\`, which is ignored".to_string());
                    Err(())
                }
            }
            c => {
                self.pos += c.len_utf8();
                let msg = format!("unknown escape sequence `\\{c}` in string literal");
                self.error(start, self.pos, msg).note = Some(
                    "valid escapes: \\n \\t \\r \\\\ \\\" \\' \\a \\b \\f \\v \\& \\^A, decimal \\65, hex \\x41, octal \\o101"
                        .to_string(),
                );
                Err(())
            }
        }
    }

    /// `\65`, `\x41`, `\o101`: `skip` is the length of the radix letter.
    fn numeric_escape(&mut self, start: usize, radix: u32, skip: usize) -> Result<Option<char>, ()> {
        self.pos += skip;
        let digits_start = self.pos;
        let mut value: u32 = 0;
        while let Some(d) = self.peek_char().and_then(|c| c.to_digit(radix)) {
            value = value.saturating_mul(radix).saturating_add(d);
            self.pos += 1;
        }
        if self.pos == digits_start {
            let kind = if radix == 16 { "hexadecimal" } else { "octal" };
            self.error(start, self.pos, format!("missing {kind} digits in escape sequence"));
            return Err(());
        }
        match char::from_u32(value) {
            Some(c) => Ok(Some(c)),
            None => {
                let text = &self.text[start..self.pos];
                self.error(start, self.pos, format!("escape `{text}` is not a valid Unicode character"));
                Err(())
            }
        }
    }
}

/// Classify a run of identifier characters as a number or a symbol.
/// A run starting with a digit (after an optional sign) must be a number.
fn classify_word(run: &str) -> Result<Atom, (String, Option<String>)> {
    let (negative, body) = match run.as_bytes().first() {
        Some(b'-') => (true, &run[1..]),
        Some(b'+') => (false, &run[1..]),
        _ => (false, run),
    };
    if !body.starts_with(|c: char| c.is_ascii_digit()) {
        return Ok(Atom::Symbol(run.to_string()));
    }
    let malformed = |note: Option<&str>| (format!("malformed number literal `{run}`"), note.map(str::to_string));

    let radix_digits = |prefix: [&str; 2]| prefix.iter().find_map(|p| body.strip_prefix(p));
    for (prefix, radix) in [(["0x", "0X"], 16), (["0o", "0O"], 8)] {
        if let Some(digits) = radix_digits(prefix) {
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                let kind = if radix == 16 { "hexadecimal digits" } else { "octal digits" };
                return Err(malformed(Some(&format!("`{}` must be followed by {kind} only", prefix[0]))));
            }
            return integer(run, negative, digits, radix);
        }
    }

    let bytes = body.as_bytes();
    let digits = |from: usize| bytes[from..].iter().take_while(|b| b.is_ascii_digit()).count();
    let int_len = digits(0);
    let mut i = int_len;
    let mut is_float = false;
    if bytes.get(i) == Some(&b'.') {
        let frac = digits(i + 1);
        if frac == 0 {
            return Err(malformed(Some(&format!(
                "a float needs at least one digit after the `.`, e.g. `{}.0`",
                &run[..run.len() - body.len() + i]
            ))));
        }
        i += 1 + frac;
        is_float = true;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp = digits(i);
        if exp == 0 {
            return Err(malformed(Some("the exponent needs digits, e.g. `1e5` or `1.5e-3`")));
        }
        i += exp;
        is_float = true;
    }
    if i != bytes.len() {
        let note = if bytes[int_len..].first().is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_') && !is_float {
            "names cannot start with a digit"
        } else {
            "numbers are written like `42`, `-7`, `0x2A`, `0o52`, `1.5`, `1e5` or `-1.5e-3`"
        };
        return Err(malformed(Some(note)));
    }
    if is_float {
        return match run.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Atom::Float(f)),
            _ => Err((format!("float literal `{run}` is out of range"), None)),
        };
    }
    integer(run, negative, body, 10)
}

/// An integer literal from its digits; must fit in an `i64`.
fn integer(run: &str, negative: bool, digits: &str, radix: u32) -> Result<Atom, (String, Option<String>)> {
    let too_big = || {
        let what = if negative { "too small" } else { "too large" };
        (
            format!("integer literal `{run}` is {what} for a 64-bit Integer"),
            Some(format!("Integers range from {} to {}", i64::MIN, i64::MAX)),
        )
    };
    let magnitude = u64::from_str_radix(digits, radix).map_err(|_| too_big())?;
    let value = if negative { 0i128 - magnitude as i128 } else { magnitude as i128 };
    i64::try_from(value).map(Atom::Integer).map_err(|_| too_big())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<SExpr> {
        let (forms, errors) = read_sexprs(text);
        assert!(errors.is_empty(), "unexpected errors for {text:?}: {errors:?}");
        forms
    }

    fn atom(text: &str) -> Atom {
        let forms = read(text);
        assert_eq!(forms.len(), 1, "{text:?}");
        match &forms[0].kind {
            SExprKind::Atom(a) => a.clone(),
            k => panic!("not an atom: {k:?}"),
        }
    }

    fn errors(text: &str) -> Vec<SyntaxError> {
        read_sexprs(text).1
    }

    /// The single error of reading `text`, as (text under the span, message).
    fn one_error(text: &str) -> (String, String) {
        let errs = errors(text);
        assert_eq!(errs.len(), 1, "expected one error for {text:?}, got {errs:?}");
        (text[errs[0].span.range()].to_string(), errs[0].message.clone())
    }

    /// A compact rendering of a tree, for comparing structure.
    fn show(e: &SExpr) -> String {
        match &e.kind {
            SExprKind::Atom(Atom::Integer(n)) => format!("{n}"),
            SExprKind::Atom(Atom::Float(f)) => format!("{f:?}"),
            SExprKind::Atom(Atom::String(s)) => format!("{s:?}"),
            SExprKind::Atom(Atom::Symbol(s)) => s.clone(),
            SExprKind::Atom(Atom::Invalid) => "<invalid>".to_string(),
            SExprKind::List { bracket, items, .. } => {
                let inner: Vec<String> = items.iter().map(show).collect();
                format!("{}{}{}", bracket.open_char(), inner.join(" "), bracket.close_char())
            }
        }
    }

    fn show_all(text: &str) -> String {
        read_sexprs(text).0.iter().map(show).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn integers() {
        assert_eq!(atom("42"), Atom::Integer(42));
        assert_eq!(atom("-7"), Atom::Integer(-7));
        assert_eq!(atom("+7"), Atom::Integer(7));
        assert_eq!(atom("0"), Atom::Integer(0));
        assert_eq!(atom("007"), Atom::Integer(7));
        assert_eq!(atom("0x1F"), Atom::Integer(31));
        assert_eq!(atom("0XfF"), Atom::Integer(255));
        assert_eq!(atom("-0x10"), Atom::Integer(-16));
        assert_eq!(atom("0o17"), Atom::Integer(15));
        assert_eq!(atom("0O777"), Atom::Integer(511));
        assert_eq!(atom("9223372036854775807"), Atom::Integer(i64::MAX));
        assert_eq!(atom("-9223372036854775808"), Atom::Integer(i64::MIN));
        assert_eq!(atom("0x7FFFFFFFFFFFFFFF"), Atom::Integer(i64::MAX));
    }

    #[test]
    fn integers_out_of_range() {
        for text in
            ["9223372036854775808", "-9223372036854775809", "0xFFFFFFFFFFFFFFFF", "123456789012345678901234567890"]
        {
            let (under, msg) = one_error(text);
            assert_eq!(under, text);
            assert!(msg.contains("for a 64-bit Integer"), "{msg}");
            assert_eq!(read_sexprs(text).0[0].kind, SExprKind::Atom(Atom::Invalid));
        }
    }

    #[test]
    fn floats() {
        assert_eq!(atom("1.5"), Atom::Float(1.5));
        assert_eq!(atom("0.0"), Atom::Float(0.0));
        assert_eq!(atom("-1e38"), Atom::Float(-1e38));
        assert_eq!(atom("1.5e-3"), Atom::Float(1.5e-3));
        assert_eq!(atom("+2.0E+5"), Atom::Float(2.0e5));
        assert_eq!(atom("1e5"), Atom::Float(1e5));
        assert_eq!(atom("100000.0"), Atom::Float(100000.0));
        assert_eq!(atom("-0.5"), Atom::Float(-0.5));
    }

    #[test]
    fn malformed_numbers() {
        for text in ["1.", "12ab", "1e", "1e+", "1.5e", "0x", "0xG", "0o8", "1.2.3", "-1.", "3_000", "0b101", "1.e5"] {
            let (under, msg) = one_error(text);
            assert_eq!(under, text);
            assert!(msg.starts_with("malformed number literal"), "{text}: {msg}");
        }
        assert_eq!(one_error("1e999").1, "float literal `1e999` is out of range");
        let errs = errors("12ab");
        assert_eq!(errs[0].note.as_deref(), Some("names cannot start with a digit"));
        let errs = errors("1.");
        assert!(errs[0].note.as_deref().is_some_and(|n| n.contains("`1.0`")), "{errs:?}");
    }

    #[test]
    fn symbols() {
        for s in [
            "x",
            "get$1$2",
            "x'",
            "aten::mul",
            "$ranhashdoub",
            "a.b",
            "fun@ii",
            "R$dot",
            ":",
            "-",
            "+",
            "-x",
            ".5",
            "+.5",
            "a1",
            "|",
            "~x?",
        ] {
            assert_eq!(atom(s), Atom::Symbol(s.to_string()), "{s}");
        }
        // `:` is an identifier character, so this is one symbol.
        assert_eq!(atom("x:Float"), Atom::Symbol("x:Float".to_string()));
    }

    #[test]
    fn nul_in_a_string_is_an_error() {
        // Raw, and by every escape that makes it: native code's strings end
        // at NUL (a fuzzer finding: `ksc run` printed less than `--interp`).
        for text in ["\"a\0b\"", r#""a\0b""#, r#""\x0""#, r#""\o0""#, r#""\^@""#] {
            let errs = errors(text);
            assert_eq!(errs.len(), 1, "{text:?}: {errs:?}");
            assert!(errs[0].message.contains("NUL"), "{}", errs[0].message);
        }
        assert_eq!(atom(r#""\1""#), Atom::String("\u{1}".into()));
    }

    #[test]
    fn strings_and_escapes() {
        assert_eq!(atom(r#""hello""#), Atom::String("hello".into()));
        assert_eq!(atom(r#""""#), Atom::String(String::new()));
        assert_eq!(atom(r#""\n\t\r\\\"\'\a\b\f\v""#), Atom::String("\n\t\r\\\"'\u{7}\u{8}\u{c}\u{b}".into()));
        assert_eq!(atom(r#""\65\x41\o101\x3bb""#), Atom::String("AAA\u{3bb}".into()));
        assert_eq!(atom(r#""\1234\&5""#), Atom::String("\u{4d2}5".into()));
        assert_eq!(atom(r#""a\^Ab""#), Atom::String("a\u{1}b".into()));
        assert_eq!(atom("\"a\\   \n   \\b\""), Atom::String("ab".into()));
        assert_eq!(atom("\"λ (x)\""), Atom::String("λ (x)".into()));
        // A string delimits tokens on both sides.
        assert_eq!(show_all(r#"(f"a"b)"#), r#"(f "a" b)"#);
    }

    #[test]
    fn bad_strings() {
        let (under, msg) = one_error(r#"(f "a\qb" x)"#);
        assert_eq!(under, r"\q");
        assert!(msg.contains("unknown escape"), "{msg}");
        assert_eq!(show_all(r#"(f "a\qb" x)"#), "(f <invalid> x)");

        let (under, msg) = one_error("(f \"abc\n x)");
        assert_eq!(under, "\"");
        assert!(msg.contains("unterminated string"), "{msg}");
        assert_eq!(show_all("(f \"abc\n x)"), "(f <invalid> x)");

        assert!(one_error("\"abc").1.contains("unterminated string"));
        assert!(one_error("\"abc\\").1.contains("unterminated string"));
        assert!(one_error(r#""\x""#).1.contains("missing hexadecimal digits"));
        assert!(one_error(r#""\1114112""#).1.contains("not a valid Unicode character"));
        assert!(one_error(r#""\xD800""#).1.contains("not a valid Unicode character"));
        // Two bad escapes in one string: both reported.
        assert_eq!(errors(r#""\q\z""#).len(), 2);
    }

    #[test]
    fn lists_and_spans() {
        let text = "(def f [g Float]\n  (x 1))";
        let forms = read(text);
        assert_eq!(forms.len(), 1);
        assert_eq!(show(&forms[0]), "(def f [g Float] (x 1))");
        assert_eq!(forms[0].span, Span::new(0, text.len()));
        let (_, items) = forms[0].as_list().unwrap();
        assert_eq!(&text[items[2].span.range()], "[g Float]");
        assert_eq!(items[2].as_list().unwrap().0, Bracket::Square);
        assert_eq!(&text[items[3].span.range()], "(x 1)");
        assert_eq!(&text[items[1].span.range()], "f");
        assert!(forms[0].brackets_balanced());
        assert_eq!(show_all("() [] (())"), "() [] (())");
    }

    #[test]
    fn comments() {
        assert_eq!(show_all("; comment\n(a b) ; more\n(c)"), "(a b) (c)");
        assert_eq!(show_all("#| a #| b |# c |# (x)"), "(x)");
        assert_eq!(show_all("(a #| inside |# b)"), "(a b)");
        assert_eq!(show_all("(a;c\nb)"), "(a b)");
        assert_eq!(show_all("x#|c|#y"), "x y");
        assert_eq!(show_all("#|#||#|#z"), "z");
        assert_eq!(show_all("; only a comment"), "");
        let (under, msg) = one_error("(a) #| x #| y |# (b)");
        assert_eq!(under, "#|");
        assert!(msg.contains("unterminated block comment"));
        // The error is at the outer comment's start.
        assert_eq!(errors("(a) #| x #| y |# (b)")[0].span, Span::new(4, 6));
    }

    #[test]
    fn byte_order_mark_is_ignored() {
        assert_eq!(show_all("\u{FEFF}(a)"), "(a)");
    }

    #[test]
    fn invalid_characters() {
        let (under, msg) = one_error("(f { x)");
        assert_eq!(under, "{");
        assert_eq!(msg, "unexpected character `{`");
        assert_eq!(show_all("(f { x)"), "(f x)");

        // Glued to a name, the whole token becomes a placeholder.
        let (under, msg) = one_error("(f naïve x)");
        assert_eq!(under, "ï");
        assert_eq!(msg, "unexpected character `ï`");
        assert_eq!(show_all("(f naïve x)"), "(f <invalid> x)");

        assert_eq!(one_error("(f \u{1} x)").1, "unexpected character U+0001");
        assert_eq!(one_error("#t").1, "unexpected character `#`");
        assert_eq!(one_error("a`b").0, "`");
        // Two separate bad characters in one token: two errors.
        assert_eq!(errors("a{b}c").len(), 2);
        // A run of bad characters is one error.
        assert_eq!(one_error("(x {{{ y)").0, "{{{");
    }

    #[test]
    fn stray_and_mismatched_brackets() {
        let (under, msg) = one_error("(a)) (b)");
        assert_eq!(under, ")");
        assert!(msg.contains("unexpected `)`"));
        assert_eq!(show_all("(a)) (b)"), "(a) (b)");

        let (under, msg) = one_error("(a b]");
        assert_eq!(under, "]");
        assert_eq!(msg, "mismatched brackets: `(` closed by `]`");
        let forms = read_sexprs("(a b]").0;
        assert_eq!(show(&forms[0]), "(a b)");
        assert!(!forms[0].brackets_balanced());
        let err = &errors("\n  (a b]")[0];
        assert_eq!(err.note.as_deref(), Some("the `(` opened at line 2, column 3 should be closed by `)`"));
    }

    #[test]
    fn unclosed_at_end_of_file() {
        let text = "(a) (b (c d)";
        let (under, msg) = one_error(text);
        assert_eq!(under, "(");
        assert_eq!(msg, "unclosed `(`: no matching `)` at the end of the file");
        assert_eq!(errors(text)[0].span, Span::new(4, 5));
        let forms = read_sexprs(text).0;
        assert_eq!(show_all(text), "(a) (b (c d))");
        assert!(!forms[1].brackets_balanced());
        assert_eq!(&text[forms[1].span.range()], "(b (c d)");

        let errs = errors("(a (b (c");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].span, Span::new(0, 1));
        assert_eq!(errs[0].note.as_deref(), Some("2 more lists opened inside it are not closed either"));
        assert_eq!(one_error("[x").1, "unclosed `[`: no matching `]` at the end of the file");
    }

    #[test]
    fn unclosed_recovers_at_next_line_starting_with_paren() {
        let text = "(def f Float (x : Float)\n  (add x 1.0)\n(def g Float (y : Float) y)\n(def h)";
        let (forms, errs) = read_sexprs(text);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].span, Span::new(0, 1));
        assert_eq!(errs[0].message, "unclosed `(`: no matching `)` before the next top-level `(` on line 3");
        let shown: Vec<String> = forms.iter().map(show).collect();
        assert_eq!(shown, ["(def f Float (x : Float) (add x 1.0))", "(def g Float (y : Float) y)", "(def h)"]);
        assert!(!forms[0].brackets_balanced());
        assert!(forms[1].brackets_balanced());

        // Two unclosed forms in a row: both reported, everything kept.
        let (forms, errs) = read_sexprs("(a\n(b\n(c)");
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert_eq!(forms.len(), 3);

        // A `(` at the start of a line inside a form that is closed is fine.
        assert_eq!(show_all("(a\n(b))"), "(a (b))");
    }

    #[test]
    fn deep_nesting_is_cut() {
        let depth = MAX_DEPTH;
        let ok = format!("{}x{}", "(".repeat(depth), ")".repeat(depth));
        assert!(errors(&ok).is_empty());

        let deep = format!("{}x{} (y)", "(".repeat(depth + 1), ")".repeat(depth + 1));
        let (forms, errs) = read_sexprs(&deep);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].message, "nesting deeper than 1000 levels");
        assert_eq!(errs[0].span, Span::new(depth, depth + 1));
        assert_eq!(forms.len(), 2);

        for text in ["(".repeat(100_000), "[".repeat(100_000), ")".repeat(100_000), "(\n".repeat(100_000)] {
            let (_, errs) = read_sexprs(&text);
            assert!(!errs.is_empty());
            assert!(errs.iter().all(|e| e.span.end as usize <= text.len()));
        }
    }

    #[test]
    fn error_recovery_reports_every_error() {
        let text = "(a 1. \"\\q\" { ) ] (b 0x) (c";
        let errs = errors(text);
        let msgs: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(errs.len(), 6, "{msgs:?}");
        assert!(msgs[0].contains("malformed number"));
        assert!(msgs[1].contains("unknown escape"));
        assert!(msgs[2].contains("unexpected character"));
        assert!(msgs[3].contains("unexpected `]`"));
        assert!(msgs[4].contains("malformed number"));
        assert!(msgs[5].contains("unclosed"));
    }
}
