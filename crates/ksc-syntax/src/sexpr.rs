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

/// The start of the message of a string literal with no closing quote.
const UNTERMINATED_STRING: &str = "unterminated string literal";

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
        // A string left open on a line inside the form took the brackets
        // after it: that error is the cause, and the only one reported.
        if self.errors.iter().any(|e| e.span.start >= u.open.start && e.message.starts_with(UNTERMINATED_STRING)) {
            return;
        }
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
                        Ok(Some('\0')) => ok = self.nul_in_string(at),
                        Ok(Some(c)) => out.push(c),
                        Ok(None) => {}
                        Err(()) => ok = false,
                    }
                }
                '\0' => {
                    self.pos += 1;
                    ok = self.nul_in_string(self.pos - 1);
                }
                c => {
                    out.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
        self.error(start, start + 1, format!("{UNTERMINATED_STRING}: no closing `\"` on this line")).note =
            Some("a string cannot span lines; write a newline as `\\n`".to_string());
        Atom::Invalid
    }

    /// Reports a NUL character (written at `at`, up to `pos`) in a string
    /// literal. Native code passes strings as C strings, which end at the
    /// first NUL, so a string holding one would print and compare
    /// differently there than in the interpreter. Returns `false`.
    fn nul_in_string(&mut self, at: usize) -> bool {
        self.error(at, self.pos, "a string literal cannot contain the NUL character").note =
            Some("strings are C strings in native code, which end at the first NUL".to_string());
        false
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
        // Out of range either way: too large for a Float, or a nonzero
        // number too small for one (it would silently be 0).
        let mantissa = run.split(['e', 'E']).next().unwrap_or(run);
        let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
        return match run.parse::<f64>() {
            Ok(f) if f.is_finite() && (f != 0.0 || !nonzero) => Ok(Atom::Float(f)),
            Ok(f) if f.is_finite() => Err((
                format!("float literal `{run}` is out of range: too close to 0 for a Float, it would be 0"),
                Some("the smallest positive Float is about 4.9e-324; write 0.0 for zero".to_string()),
            )),
            _ => Err((
                format!("float literal `{run}` is out of range"),
                Some("the largest Float is about 1.8e308".to_string()),
            )),
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
