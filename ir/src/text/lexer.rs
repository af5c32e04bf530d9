//! The lexer of the graph-IR text form: turns text into [`Token`]s on demand (so a large
//! `#[metadata]` section streams through without being stored as tokens), each with
//! the 1-based line and column where it starts. Skips whitespace, `// line` comments and
//! `/* block */` comments (so the `/* ty=... */` annotations the printer writes are
//! ignored). Never panics: a character it does not know, an unterminated string or an
//! unterminated comment is an [`Error::Parse`] at its position.

use std::fmt;

use crate::error::{Error, Result};

/// A 1-based line:column position in the text.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pos {
    pub line: usize,
    pub col: usize,
}

impl Pos {
    /// A parse error at this position.
    pub fn error(self, message: impl Into<String>) -> Error {
        Error::Parse {
            line: self.line,
            col: self.col,
            message: message.into(),
        }
    }
}

/// What a token is.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    /// `%name`, `%"quoted name"` or `%0`; `numeric` is true for an unquoted all-digit
    /// name (a graph binding such as `%12`).
    Local {
        name: String,
        numeric: bool,
    },
    /// `@name` or `@"quoted name"`.
    Global(String),
    /// A name: `def`, `fn`, `Tensor`, `float32`, `True`, `nn.conv2d`, `relay.Constant`.
    Ident(String),
    /// A numeric literal as written, sign and suffix included: `1`, `-2.5`, `2e-05f`,
    /// `3i64`, `-inff`.
    Number(String),
    /// A string literal, unescaped.
    Str(String),
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Comma,
    Colon,
    Semi,
    Eq,
    Dot,
    Arrow,
    Hash,
    /// End of the input (or of the part being parsed).
    Eof,
}

impl fmt::Display for Tok {
    /// How the token is named in "expected X, found Y" messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Local { name, numeric } => {
                if *numeric || is_identifier(name) {
                    write!(f, "`%{name}`")
                } else {
                    write!(f, "`%{name:?}`")
                }
            }
            Tok::Global(name) => write!(f, "`@{name}`"),
            Tok::Ident(s) => write!(f, "`{s}`"),
            Tok::Number(s) => write!(f, "number `{s}`"),
            Tok::Str(s) => write!(f, "string {s:?}"),
            Tok::LParen => f.write_str("`(`"),
            Tok::RParen => f.write_str("`)`"),
            Tok::LBracket => f.write_str("`[`"),
            Tok::RBracket => f.write_str("`]`"),
            Tok::LBrace => f.write_str("`{`"),
            Tok::RBrace => f.write_str("`}`"),
            Tok::Comma => f.write_str("`,`"),
            Tok::Colon => f.write_str("`:`"),
            Tok::Semi => f.write_str("`;`"),
            Tok::Eq => f.write_str("`=`"),
            Tok::Dot => f.write_str("`.`"),
            Tok::Arrow => f.write_str("`->`"),
            Tok::Hash => f.write_str("`#`"),
            Tok::Eof => f.write_str("end of input"),
        }
    }
}

/// A token and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub pos: Pos,
    /// Byte offset of the token's start in the text.
    pub offset: usize,
}

/// True for names the printer writes without quotes: `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Produces the tokens of a text one at a time.
#[derive(Clone, Debug)]
pub(crate) struct Lexer<'t> {
    text: &'t str,
    /// Byte offset of the next character.
    at: usize,
    line: usize,
    col: usize,
    /// The last token was a `.`, so a number is read as a bare integer.
    after_dot: bool,
}

impl<'t> Lexer<'t> {
    /// A lexer at the start of `text`.
    pub fn new(text: &'t str) -> Lexer<'t> {
        Lexer {
            text,
            at: 0,
            line: 1,
            col: 1,
            after_dot: false,
        }
    }

    /// The next token; [`Tok::Eof`] at the end (and again after it).
    pub fn next_token(&mut self) -> Result<Token> {
        let t = self.lex(self.after_dot)?;
        self.after_dot = t.tok == Tok::Dot;
        Ok(t)
    }

    fn peek(&self) -> Option<char> {
        self.text.get(self.at..).and_then(|s| s.chars().next())
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.text.get(self.at..).and_then(|s| s.chars().nth(n))
    }

    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
        }
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn bump_while(&mut self, out: &mut String, keep: impl Fn(char) -> bool) {
        while let Some(c) = self.peek().filter(|&c| keep(c)) {
            out.push(c);
            self.bump();
        }
    }

    /// Skips whitespace and comments.
    fn skip_trivia(&mut self) -> Result<()> {
        loop {
            match (self.peek(), self.peek_at(1)) {
                (Some(c), _) if c.is_whitespace() => {
                    self.bump();
                }
                (Some('/'), Some('/')) => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                (Some('/'), Some('*')) => {
                    let start = self.pos();
                    self.bump();
                    self.bump();
                    loop {
                        match (self.peek(), self.peek_at(1)) {
                            (Some('*'), Some('/')) => {
                                self.bump();
                                self.bump();
                                break;
                            }
                            (Some(_), _) => {
                                self.bump();
                            }
                            (None, _) => return Err(start.error("unterminated `/*` comment")),
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// A string literal starting at the opening quote, with Rust-style escapes (what
    /// `{:?}` writes): `\"`, `\\`, `\n`, `\r`, `\t`, `\0`, `\'`, `\u{...}`.
    fn string(&mut self) -> Result<String> {
        let start = self.pos();
        self.bump();
        let mut out = String::new();
        loop {
            let here = self.pos();
            match self.bump() {
                None => return Err(start.error("unterminated string literal")),
                Some('"') => return Ok(out),
                Some('\\') => match self.bump() {
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('\'') => out.push('\''),
                    Some('n') => out.push('\n'),
                    Some('r') => out.push('\r'),
                    Some('t') => out.push('\t'),
                    Some('0') => out.push('\0'),
                    Some('u') => {
                        if self.bump() != Some('{') {
                            return Err(here.error("expected `{` after `\\u` in a string literal"));
                        }
                        let mut hex = String::new();
                        self.bump_while(&mut hex, |c| c.is_ascii_hexdigit());
                        if self.bump() != Some('}') {
                            return Err(here.error("expected `}` to close a `\\u{...}` escape"));
                        }
                        let c = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32);
                        match c {
                            Some(c) if hex.len() <= 6 => out.push(c),
                            _ => {
                                return Err(
                                    here.error(format!("invalid unicode escape `\\u{{{hex}}}`"))
                                );
                            }
                        }
                    }
                    Some(c) => {
                        return Err(
                            here.error(format!("unknown escape `\\{c}` in a string literal"))
                        );
                    }
                    None => return Err(start.error("unterminated string literal")),
                },
                Some(c) => out.push(c),
            }
        }
    }

    /// The name after `%` or `@`: identifier characters, or a quoted string.
    fn sigil_name(&mut self, sigil: char) -> Result<(String, bool)> {
        let start = self.pos();
        self.bump();
        if self.peek() == Some('"') {
            return Ok((self.string()?, true));
        }
        let mut name = String::new();
        self.bump_while(&mut name, is_name_char);
        if name.is_empty() {
            return Err(start.error(format!("expected a name after `{sigil}`")));
        }
        Ok((name, false))
    }

    /// A number: `-`? then digits with optional fraction and exponent, or `inf`/`nan`;
    /// then an optional suffix (`f`, `f16`, `i64`, ...). After a `.` token only digits
    /// are read, so `%3.0.1` is two tuple accesses and not the float `0.1`.
    fn number(&mut self, after_dot: bool) -> String {
        let mut s = String::new();
        if after_dot {
            self.bump_while(&mut s, |c| c.is_ascii_digit());
            return s;
        }
        if self.peek() == Some('-') {
            s.push('-');
            self.bump();
        }
        if self.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
            self.bump_while(&mut s, is_name_char);
            return s;
        }
        self.bump_while(&mut s, |c| c.is_ascii_digit());
        if self.peek() == Some('.') && self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) {
            s.push('.');
            self.bump();
            self.bump_while(&mut s, |c| c.is_ascii_digit());
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            let digit_at = |n: usize| self.peek_at(n).is_some_and(|c| c.is_ascii_digit());
            let exponent = if digit_at(1) {
                Some(1)
            } else if matches!(self.peek_at(1), Some('+' | '-')) && digit_at(2) {
                Some(2)
            } else {
                None
            };
            if let Some(n) = exponent {
                for _ in 0..n {
                    s.extend(self.bump());
                }
                self.bump_while(&mut s, |c| c.is_ascii_digit());
            }
        }
        self.bump_while(&mut s, is_name_char);
        s
    }

    fn lex(&mut self, after_dot: bool) -> Result<Token> {
        self.skip_trivia()?;
        let pos = self.pos();
        let offset = self.at;
        let Some(c) = self.peek() else {
            return Ok(Token {
                tok: Tok::Eof,
                pos,
                offset,
            });
        };
        let single = |t: Tok| Some(t);
        let punct = match c {
            '(' => single(Tok::LParen),
            ')' => single(Tok::RParen),
            '[' => single(Tok::LBracket),
            ']' => single(Tok::RBracket),
            '{' => single(Tok::LBrace),
            '}' => single(Tok::RBrace),
            ',' => single(Tok::Comma),
            ':' => single(Tok::Colon),
            ';' => single(Tok::Semi),
            '=' => single(Tok::Eq),
            '.' => single(Tok::Dot),
            '#' => single(Tok::Hash),
            _ => None,
        };
        if let Some(tok) = punct {
            self.bump();
            return Ok(Token { tok, pos, offset });
        }
        let tok = match c {
            '%' => {
                let (name, quoted) = self.sigil_name('%')?;
                let numeric = !quoted && name.chars().all(|c| c.is_ascii_digit());
                Tok::Local { name, numeric }
            }
            '@' => Tok::Global(self.sigil_name('@')?.0),
            '"' => Tok::Str(self.string()?),
            '-' if self.peek_at(1) == Some('>') => {
                self.bump();
                self.bump();
                Tok::Arrow
            }
            '-' if self.peek_at(1).is_some_and(|c| c.is_ascii_digit())
                || (self.peek_at(1) == Some('i') && self.peek_at(2) == Some('n'))
                || (self.peek_at(1) == Some('n') && self.peek_at(2) == Some('a')) =>
            {
                Tok::Number(self.number(false))
            }
            c if c.is_ascii_digit() => Tok::Number(self.number(after_dot)),
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut s = String::new();
                loop {
                    self.bump_while(&mut s, is_name_char);
                    let dotted_name = self.peek() == Some('.')
                        && self
                            .peek_at(1)
                            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
                    if !dotted_name {
                        break;
                    }
                    s.push('.');
                    self.bump();
                }
                Tok::Ident(s)
            }
            other => {
                return Err(pos.error(format!("unexpected character `{}`", other.escape_debug())));
            }
        };
        Ok(Token { tok, pos, offset })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token of `text`; the last one is [`Tok::Eof`].
    fn tokenize(text: &str) -> Result<Vec<Token>> {
        let mut lexer = Lexer::new(text);
        let mut out = Vec::new();
        loop {
            let token = lexer.next_token()?;
            let end = token.tok == Tok::Eof;
            out.push(token);
            if end {
                return Ok(out);
            }
        }
    }

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    fn local(name: &str, numeric: bool) -> Tok {
        Tok::Local {
            name: name.into(),
            numeric,
        }
    }

    #[test]
    fn splits_a_binding_line() {
        assert_eq!(
            toks("%3 = nn.conv2d(%data, %\"w.1\", epsilon=2e-05f) /* ty=float32 */;"),
            vec![
                local("3", true),
                Tok::Eq,
                Tok::Ident("nn.conv2d".into()),
                Tok::LParen,
                local("data", false),
                Tok::Comma,
                local("w.1", false),
                Tok::Comma,
                Tok::Ident("epsilon".into()),
                Tok::Eq,
                Tok::Number("2e-05f".into()),
                Tok::RParen,
                Tok::Semi,
                Tok::Eof,
            ]
        );
    }

    #[test]
    fn tuple_access_after_dot_is_an_integer() {
        assert_eq!(
            toks("%3.0.1 -1.5 -inff 3i64 1e+20f16 @f -> // gone\n#"),
            vec![
                local("3", true),
                Tok::Dot,
                Tok::Number("0".into()),
                Tok::Dot,
                Tok::Number("1".into()),
                Tok::Number("-1.5".into()),
                Tok::Number("-inff".into()),
                Tok::Number("3i64".into()),
                Tok::Number("1e+20f16".into()),
                Tok::Global("f".into()),
                Tok::Arrow,
                Tok::Hash,
                Tok::Eof,
            ]
        );
    }

    #[test]
    fn strings_unescape_what_debug_writes() {
        let s = "a \"b\" \\ \n \t \u{7f} é";
        assert_eq!(toks(&format!("{s:?}")), vec![Tok::Str(s.into()), Tok::Eof]);
    }

    #[test]
    fn errors_have_positions() {
        let e = tokenize("def @main() {\n  $x").unwrap_err().to_string();
        assert_eq!(e, "parse error at 2:3: unexpected character `$`");
        let e = tokenize("a /* never\n closed").unwrap_err().to_string();
        assert_eq!(e, "parse error at 1:3: unterminated `/*` comment");
        let e = tokenize("x = \"abc").unwrap_err().to_string();
        assert_eq!(e, "parse error at 1:5: unterminated string literal");
        let e = tokenize("  % x").unwrap_err().to_string();
        assert_eq!(e, "parse error at 1:3: expected a name after `%`");
    }
}
