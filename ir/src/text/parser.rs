//! The parser of the graph-IR text form: reads what the printer writes (with or without
//! `/* ty=... */` annotations, which are comments) back into a [`Module`]. Every node is
//! built through the [`Module`] builder, so types are inferred again and a type error
//! is reported at the line and column of the call that causes it.
//!
//! Grammar, informally:
//!
//! ```text
//! module   := ('#' '[' 'version' '=' STRING ']')? def* ('#' '[' 'metadata' ']' meta*)?
//! def      := 'def' GLOBAL params ('->' type)? '{' body '}'
//! params   := '(' (LOCAL ':' type | NAME '=' attr),* ')'      // Primitive=1 is the only fn attr
//! body     := (LOCAL '=' expr ';')* expr
//! expr     := primary ('(' expr,* ')' | '.' INT)*
//! primary  := LOCAL | GLOBAL | literal | 'meta' '[' 'relay.Constant' ']' '[' INT ']'
//!           | '(' ')' | '(' expr ')' | '(' expr ',' (expr,*)? ')'
//!           | 'fn' params ('->' type)? '{' body '}' | OPNAME '(' expr,* (NAME '=' attr),* ')'
//! type     := 'Tensor' '[' '(' INT,* ')' ',' DTYPE ']' | DTYPE | '(' type,* ')'
//!           | 'fn' '(' type,* ')' '->' type
//! meta     := 'meta' '[' 'relay.Constant' ']' '[' INT ']' '=' type '[' value,* ']'
//! ```
//!
//! Names live in one scope per def (bindings, parameters and the parameters of nested
//! functions together), so they must be unique within a def, as the printer makes them;
//! whether a variable is used outside its function is the verifier's question. A global
//! must be defined before it is called (so a function cannot call itself). The
//! `#[metadata]` section is read first, so constants may refer to it from anywhere.
//! Attributes written `None` are treated as absent. Any input gives `Ok` or an
//! [`Error::Parse`] with a 1-based line and column; nesting deeper than
//! [`MAX_NESTING`] is an error rather than a stack overflow.

use std::collections::{HashMap, HashSet, VecDeque};

use half::f16;

use crate::attrs::AttrValue;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::{ExprId, FnAttrs, Module};
use crate::op::OpRegistry;
use crate::tensor::{Data, NDArray};
use crate::text::lexer::{Lexer, Pos, Tok, Token};
use crate::ty::{FuncType, TensorType, Type, fmt_shape};

/// How deeply expressions, types and attribute lists may nest.
pub const MAX_NESTING: usize = 100;

/// Parses the text form with the built-in ops.
pub fn parse_module(text: &str) -> Result<Module> {
    parse_module_with(text, &OpRegistry::new())
}

/// Parses the text form with the built-in ops and the custom ops of `registry`.
pub fn parse_module_with(text: &str, registry: &OpRegistry) -> Result<Module> {
    let (metadata, declared) = scan(text);
    let mut p = Parser {
        lexer: Lexer::new(text),
        buf: VecDeque::new(),
        stop: usize::MAX,
        ended: None,
        lex_error: None,
        registry,
        m: Module::new(),
        scope: HashMap::new(),
        meta_values: HashMap::new(),
        meta_nodes: HashMap::new(),
        has_metadata: metadata.is_some(),
        declared,
        depth: 0,
    };
    if let Some((hash_offset, lexer)) = metadata {
        p.restart(lexer, usize::MAX);
        let result = p.metadata();
        p.finish(result)?;
        p.restart(Lexer::new(text), hash_offset);
    }
    let result = p.module();
    p.finish(result)?;
    Ok(p.m)
}

/// A first pass over the tokens: where `#[metadata]` starts (the byte offset of its
/// `#` and a lexer just after it) and the names of all defs. Stops at a lexing error,
/// which the real pass reports.
fn scan(text: &str) -> (Option<(usize, Lexer<'_>)>, HashSet<String>) {
    let mut lexer = Lexer::new(text);
    let mut declared = HashSet::new();
    let mut last: VecDeque<Token> = VecDeque::with_capacity(4);
    while let Ok(t) = lexer.next_token() {
        if t.tok == Tok::Eof {
            break;
        }
        if let (Some(Tok::Ident(d)), Tok::Global(name)) = (last.back().map(|t| &t.tok), &t.tok)
            && d == "def"
        {
            declared.insert(name.clone());
        }
        if last.len() == 4 {
            last.pop_front();
        }
        last.push_back(t);
        let toks: Vec<&Tok> = last.iter().map(|t| &t.tok).collect();
        if let [Tok::Hash, Tok::LBracket, Tok::Ident(w), Tok::RBracket] = toks.as_slice()
            && w == "metadata"
        {
            return (Some((last[0].offset, lexer)), declared);
        }
    }
    (None, declared)
}

/// A name in a def's scope: `%12` (a binding number) or `%x` / `%"x"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Num(String),
    Name(String),
}

/// The parts of a numeric literal: sign and digits (or `inf`/`nan`) and the suffix.
struct Literal<'t> {
    num: &'t str,
    suffix: &'t str,
    /// Written with a fraction, an exponent, or as `inf`/`nan`.
    float_like: bool,
}

fn split_literal(text: &str) -> Literal<'_> {
    let b = text.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let rest = &text[i..];
    if rest.starts_with("inf") || rest.starts_with("nan") {
        let at = i + 3;
        return Literal {
            num: &text[..at],
            suffix: &text[at..],
            float_like: true,
        };
    }
    let digits = |i: &mut usize| {
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
    };
    digits(&mut i);
    let mut float_like = false;
    if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i += 1;
        digits(&mut i);
        float_like = true;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
        if b.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
            i += 1 + sign;
            digits(&mut i);
            float_like = true;
        }
    }
    Literal {
        num: &text[..i],
        suffix: &text[i..],
        float_like,
    }
}

/// Whether `v` fits integer dtype `dtype`.
fn int_fits(dtype: DType, v: i64) -> bool {
    match dtype {
        DType::I8 => i8::try_from(v).is_ok(),
        DType::U8 => u8::try_from(v).is_ok(),
        DType::I32 => i32::try_from(v).is_ok(),
        DType::I16 => i16::try_from(v).is_ok(),
        DType::U16 => u16::try_from(v).is_ok(),
        DType::U32 => u32::try_from(v).is_ok(),
        DType::U64 => v >= 0,
        _ => true,
    }
}

/// The element values of a metadata constant as they are read (written without
/// suffixes: `0.5`, `-inf`, `3`, `True`).
enum Values {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// float64 and bfloat16, read as `f64` (bfloat16 values print exactly as float32).
    Wide(DType, Vec<f64>),
    Int(DType, Vec<i64>),
    Bool(Vec<bool>),
}

impl Values {
    fn new(dtype: DType, capacity: usize) -> Values {
        match dtype {
            DType::F32 => Values::F32(Vec::with_capacity(capacity)),
            DType::F16 => Values::F16(Vec::with_capacity(capacity)),
            DType::Bool => Values::Bool(Vec::with_capacity(capacity)),
            d @ (DType::F64 | DType::BF16) => Values::Wide(d, Vec::with_capacity(capacity)),
            d => Values::Int(d, Vec::with_capacity(capacity)),
        }
    }

    fn push(&mut self, pos: Pos, s: &str) -> Result<()> {
        let float = || {
            let lit = split_literal(s);
            lit.num
                .parse::<f32>()
                .ok()
                .filter(|_| lit.suffix.is_empty())
        };
        let ok = match self {
            Values::F32(v) => float().map(|x| v.push(x)),
            Values::F16(v) => float().map(|x| v.push(f16::from_f32(x))),
            Values::Wide(_, v) => {
                let lit = split_literal(s);
                lit.num
                    .parse::<f64>()
                    .ok()
                    .filter(|_| lit.suffix.is_empty())
                    .map(|x| v.push(x))
            }
            Values::Int(DType::U64, v) => s.parse::<u64>().ok().map(|x| v.push(x as i64)),
            Values::Bool(v) => match s {
                "True" => {
                    let _: () = v.push(true);
                    Some(())
                }
                "False" => {
                    let _: () = v.push(false);
                    Some(())
                }
                _ => None,
            },
            Values::Int(dtype, v) => match s.parse::<i64>() {
                Ok(i) if int_fits(*dtype, i) => {
                    let _: () = v.push(i);
                    Some(())
                }
                Ok(_) => return Err(pos.error(format!("value {s} does not fit {dtype}"))),
                Err(_) => None,
            },
        };
        ok.ok_or_else(|| pos.error(format!("expected a {} value, found `{s}`", self.dtype())))
    }

    fn dtype(&self) -> DType {
        match self {
            Values::F32(_) => DType::F32,
            Values::F16(_) => DType::F16,
            Values::Wide(d, _) | Values::Int(d, _) => *d,
            Values::Bool(_) => DType::Bool,
        }
    }

    fn into_data(self) -> Data {
        match self {
            Values::F32(v) => Data::F32(v),
            Values::F16(v) => Data::F16(v),
            Values::Wide(d, v) => Data::from_f64(d, v),
            Values::Int(d, v) => Data::from_i64(d, v),
            Values::Bool(v) => Data::Bool(v),
        }
    }
}

struct Parser<'t, 'r> {
    lexer: Lexer<'t>,
    /// Tokens looked at but not consumed yet.
    buf: VecDeque<Token>,
    /// Byte offset where the part being parsed ends (the `#` of `#[metadata]` while
    /// parsing the defs).
    stop: usize,
    /// The end-of-input token, once reached.
    ended: Option<Token>,
    /// A lexing error, reported once parsing reaches it (it reads as the end).
    lex_error: Option<Error>,
    registry: &'r OpRegistry,
    m: Module,
    scope: HashMap<Key, ExprId>,
    meta_values: HashMap<usize, NDArray>,
    meta_nodes: HashMap<usize, ExprId>,
    has_metadata: bool,
    /// Every global the text defines, to tell "defined later" from "unknown".
    declared: HashSet<String>,
    depth: usize,
}

/// Turns a builder or registry error into a parse error at `pos`.
fn at(pos: Pos) -> impl Fn(Error) -> Error {
    move |e| match e {
        e @ Error::Parse { .. } => e,
        e => pos.error(e.to_string()),
    }
}

impl<'t> Parser<'t, '_> {
    /// Continues with tokens from `lexer`, up to byte offset `stop`.
    fn restart(&mut self, lexer: Lexer<'t>, stop: usize) {
        self.lexer = lexer;
        self.stop = stop;
        self.buf.clear();
        self.ended = None;
    }

    /// The result of a parse, or the lexing error if it comes first in the text.
    fn finish(&mut self, result: Result<()>) -> Result<()> {
        let Some(lex) = self.lex_error.take() else {
            return result;
        };
        let key = |e: &Error| match e {
            Error::Parse { line, col, .. } => (*line, *col),
            _ => (0, 0),
        };
        match result {
            Err(e) if key(&e) < key(&lex) => Err(e),
            _ => Err(lex),
        }
    }

    /// Makes sure `buf` holds at least `n + 1` tokens.
    fn fill(&mut self, n: usize) {
        while self.buf.len() <= n {
            let t = match &self.ended {
                Some(t) => t.clone(),
                None => {
                    let (t, end) = match self.lexer.next_token() {
                        Ok(t) if t.tok != Tok::Eof && t.offset < self.stop => (t, false),
                        Ok(t) => (Token { tok: Tok::Eof, ..t }, true),
                        Err(e) => {
                            let pos = match &e {
                                Error::Parse { line, col, .. } => Pos {
                                    line: *line,
                                    col: *col,
                                },
                                _ => Pos { line: 0, col: 0 },
                            };
                            self.lex_error = Some(e);
                            (
                                Token {
                                    tok: Tok::Eof,
                                    pos,
                                    offset: self.stop,
                                },
                                true,
                            )
                        }
                    };
                    if end {
                        self.ended = Some(t.clone());
                    }
                    t
                }
            };
            self.buf.push_back(t);
        }
    }

    fn peek_n(&mut self, n: usize) -> &Token {
        self.fill(n);
        &self.buf[n]
    }

    fn peek(&mut self) -> &Token {
        self.peek_n(0)
    }

    fn next(&mut self) -> Token {
        self.fill(0);
        match self.buf.pop_front() {
            Some(t) => t,
            None => Token {
                tok: Tok::Eof,
                pos: Pos { line: 0, col: 0 },
                offset: self.stop,
            },
        }
    }

    fn unexpected(&mut self, expected: &str) -> Error {
        let t = self.peek();
        t.pos.error(format!("expected {expected}, found {}", t.tok))
    }

    /// Consumes `tok` or fails saying `expected`.
    fn expect(&mut self, tok: Tok, expected: &str) -> Result<Pos> {
        if self.peek().tok == tok {
            Ok(self.next().pos)
        } else {
            Err(self.unexpected(expected))
        }
    }

    fn expect_ident(&mut self, word: &str) -> Result<Pos> {
        self.expect(Tok::Ident(word.into()), &format!("`{word}`"))
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self
                .peek()
                .pos
                .error(format!("nesting is deeper than {MAX_NESTING} levels")));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// A non-negative integer token (`3`, also `3i64`/`3i32` as Relay writes dims).
    fn index(&mut self, what: &str) -> Result<(Pos, usize)> {
        let t = self.next();
        if let Tok::Number(text) = &t.tok {
            let lit = split_literal(text);
            if !lit.float_like
                && matches!(lit.suffix, "" | "i32" | "i64")
                && let Ok(v) = lit.num.parse::<usize>()
            {
                return Ok((t.pos, v));
            }
        }
        Err(t.pos.error(format!(
            "expected {what} (a non-negative integer), found {}",
            t.tok
        )))
    }

    fn module(&mut self) -> Result<()> {
        if self.peek().tok == Tok::Hash {
            self.next();
            self.expect(Tok::LBracket, "`[` after `#`")?;
            self.expect_ident("version")?;
            self.expect(Tok::Eq, "`=`")?;
            if !matches!(self.peek().tok, Tok::Str(_)) {
                return Err(self.unexpected("a version string"));
            }
            self.next();
            self.expect(Tok::RBracket, "`]`")?;
        }
        loop {
            match &self.peek().tok {
                Tok::Eof => return Ok(()),
                Tok::Ident(s) if s == "def" => self.def()?,
                _ => return Err(self.unexpected("`def` or `#[metadata]`")),
            }
        }
    }

    fn metadata(&mut self) -> Result<()> {
        while self.peek().tok != Tok::Eof {
            let start = self.expect_ident("meta")?;
            let k = self.meta_index()?;
            self.expect(Tok::Eq, "`=`")?;
            let ty_pos = self.peek().pos;
            let ty = match self.ty()? {
                Type::Tensor(t) => t,
                other => {
                    return Err(
                        ty_pos.error(format!("a constant must have a tensor type, found {other}"))
                    );
                }
            };
            let values_pos = self.expect(Tok::LBracket, "`[` before the constant's values")?;
            let numel = ty.numel();
            // Values are converted as they are read, without storing their tokens.
            let mut values = Values::new(ty.dtype, numel.min(1 << 20));
            let mut count = 0usize;
            while self.peek().tok != Tok::RBracket {
                let t = self.next();
                match &t.tok {
                    Tok::Number(s) | Tok::Ident(s) if count < numel => values.push(t.pos, s)?,
                    Tok::Number(_) | Tok::Ident(_) => {}
                    other => return Err(t.pos.error(format!("expected a value, found {other}"))),
                }
                count += 1;
                if self.peek().tok != Tok::RBracket {
                    self.expect(Tok::Comma, "`,` or `]` between values")?;
                }
            }
            self.next();
            if count != numel {
                return Err(values_pos.error(format!(
                    "meta[relay.Constant][{k}] has {count} value(s) but {} holds {numel}",
                    Type::Tensor(ty.clone())
                )));
            }
            let value = NDArray::new(ty.shape, values.into_data()).map_err(at(values_pos))?;
            if self.meta_values.insert(k, value).is_some() {
                return Err(start.error(format!("meta[relay.Constant][{k}] is defined twice")));
            }
        }
        Ok(())
    }

    /// `[relay.Constant][K]` after `meta`.
    fn meta_index(&mut self) -> Result<usize> {
        self.expect(Tok::LBracket, "`[` after `meta`")?;
        self.expect_ident("relay.Constant")?;
        self.expect(Tok::RBracket, "`]`")?;
        self.expect(Tok::LBracket, "`[`")?;
        let (_, k) = self.index("a constant index")?;
        self.expect(Tok::RBracket, "`]`")?;
        Ok(k)
    }

    fn def(&mut self) -> Result<()> {
        self.next();
        let t = self.next();
        let Tok::Global(name) = t.tok else {
            return Err(t.pos.error(format!(
                "expected a global name such as `@main` after `def`, found {}",
                t.tok
            )));
        };
        if self.m.global_id(&name).is_some() {
            return Err(t.pos.error(format!("duplicate definition of `@{name}`")));
        }
        self.scope.clear();
        let f = self.function_rest(t.pos)?;
        self.m.define(&name, f).map_err(at(t.pos))
    }

    /// Parameters, optional return type and body of a def or `fn`.
    fn function_rest(&mut self, pos: Pos) -> Result<ExprId> {
        let (params, attrs) = self.params()?;
        let ret = if self.peek().tok == Tok::Arrow {
            self.next();
            let ret_pos = self.peek().pos;
            Some((ret_pos, self.ty()?))
        } else {
            None
        };
        self.expect(Tok::LBrace, "`{` to open the function body")?;
        let body = self.body()?;
        self.expect(Tok::RBrace, "`;` or `}` after an expression")?;
        if let Some((ret_pos, ret)) = ret {
            let actual = self.m.ty(body);
            if *actual != ret {
                return Err(ret_pos.error(format!(
                    "the declared return type {ret} does not match the body's type {actual}"
                )));
            }
        }
        self.m.function(&params, body, attrs).map_err(at(pos))
    }

    fn params(&mut self) -> Result<(Vec<ExprId>, FnAttrs)> {
        self.expect(Tok::LParen, "`(` to open the parameter list")?;
        let mut params = Vec::new();
        let mut attrs = FnAttrs::default();
        while self.peek().tok != Tok::RParen {
            let t = self.next();
            match t.tok {
                Tok::Local { name, numeric } => {
                    let key = if numeric {
                        Key::Num(name.clone())
                    } else {
                        Key::Name(name.clone())
                    };
                    if self.scope.contains_key(&key) {
                        return Err(t.pos.error(format!(
                            "duplicate variable {}",
                            Tok::Local { name, numeric }
                        )));
                    }
                    self.expect(Tok::Colon, "`:` and the parameter's type")?;
                    let ty = self.ty()?;
                    let v = self.m.var(name, ty);
                    self.scope.insert(key, v);
                    params.push(v);
                }
                Tok::Ident(attr) if self.peek().tok == Tok::Eq => {
                    self.next();
                    let value_pos = self.peek().pos;
                    let value = self.attr_value()?;
                    match (attr.as_str(), value) {
                        ("Primitive", Some(AttrValue::Int(i @ (0 | 1)))) => {
                            attrs.primitive = i == 1
                        }
                        ("Primitive", Some(AttrValue::Bool(b))) => attrs.primitive = b,
                        ("Primitive", _) => {
                            return Err(value_pos.error("`Primitive` must be 0 or 1"));
                        }
                        _ => {
                            return Err(t.pos.error(format!(
                                "unknown function attribute `{attr}` (kiln knows `Primitive`)"
                            )));
                        }
                    }
                }
                other => {
                    return Err(t.pos.error(format!(
                        "expected a parameter `%name: Type`, a function attribute or `)`, found {other}"
                    )));
                }
            }
            if self.peek().tok != Tok::RParen {
                self.expect(Tok::Comma, "`,` or `)` in the parameter list")?;
            }
        }
        self.next();
        Ok((params, attrs))
    }

    /// Bindings, then the final expression.
    fn body(&mut self) -> Result<ExprId> {
        loop {
            let t = self.peek().clone();
            let Tok::Local { name, numeric } = &t.tok else {
                return self.expr();
            };
            if self.peek_n(1).tok != Tok::Eq {
                return self.expr();
            }
            let key = if *numeric {
                Key::Num(name.clone())
            } else {
                Key::Name(name.clone())
            };
            if self.scope.contains_key(&key) {
                return Err(t.pos.error(format!("duplicate binding {}", t.tok)));
            }
            self.next();
            self.next();
            let e = self.expr()?;
            self.expect(Tok::Semi, "`;` after a binding")?;
            self.scope.insert(key, e);
        }
    }

    fn expr(&mut self) -> Result<ExprId> {
        self.enter()?;
        let start = self.peek().pos;
        let mut e = self.primary()?;
        loop {
            match self.peek().tok {
                Tok::LParen => {
                    let callee_ty = self.m.ty(e).clone();
                    if !matches!(callee_ty, Type::Func(_)) {
                        return Err(start.error(format!(
                            "this is not a function (its type is {callee_ty}) but it is called"
                        )));
                    }
                    let (args, _) = self.call_args("the call", false)?;
                    e = self.m.call_function(e, &args).map_err(at(start))?;
                }
                Tok::Dot => {
                    let dot = self.next().pos;
                    let (_, index) = self.index("a tuple field index after `.`")?;
                    e = self.m.tuple_get(e, index).map_err(at(dot))?;
                }
                _ => break,
            }
        }
        self.leave();
        Ok(e)
    }

    /// `(args, attrs)` of a call; attributes only where `attrs_allowed`.
    fn call_args(
        &mut self,
        what: &str,
        attrs_allowed: bool,
    ) -> Result<(Vec<ExprId>, Vec<(String, AttrValue)>)> {
        self.next();
        let mut args = Vec::new();
        let mut attrs: Vec<(String, AttrValue)> = Vec::new();
        let mut attr_names = HashSet::new();
        while self.peek().tok != Tok::RParen {
            self.fill(1);
            let attr_name = match (&self.buf[0].tok, &self.buf[1].tok) {
                (Tok::Ident(name), Tok::Eq) => Some(name.clone()),
                _ => None,
            };
            let is_attr = attr_name.is_some();
            if let Some(name) = attr_name.filter(|_| attrs_allowed) {
                let t = self.next();
                self.next();
                if !attr_names.insert(name.clone()) {
                    return Err(t.pos.error(format!("attribute `{name}` is given twice")));
                }
                if let Some(v) = self.attr_value()? {
                    attrs.push((name, v));
                }
            } else if is_attr {
                return Err(self.peek().pos.error(format!("{what} takes no attributes")));
            } else if !attr_names.is_empty() {
                return Err(
                    self.unexpected("an attribute `name=value` (arguments come before attributes)")
                );
            } else {
                args.push(self.expr()?);
            }
            if self.peek().tok != Tok::RParen {
                self.expect(
                    Tok::Comma,
                    &format!("`,` or `)` in the arguments of {what}"),
                )?;
            }
        }
        self.next();
        Ok((args, attrs))
    }

    fn primary(&mut self) -> Result<ExprId> {
        let t = self.peek().clone();
        match &t.tok {
            Tok::Local { name, numeric } => {
                self.next();
                let key = if *numeric {
                    Key::Num(name.clone())
                } else {
                    Key::Name(name.clone())
                };
                self.scope
                    .get(&key)
                    .copied()
                    .ok_or_else(|| t.pos.error(format!("unknown variable {}", t.tok)))
            }
            Tok::Global(name) => {
                self.next();
                if self.m.global_id(name).is_some() {
                    self.m.global(name).map_err(at(t.pos))
                } else if self.declared.contains(name) {
                    Err(t.pos.error(format!(
                        "global `@{name}` is used before its definition (define it earlier in the file)"
                    )))
                } else {
                    Err(t.pos.error(format!("unknown global `@{name}`")))
                }
            }
            Tok::Number(text) => {
                self.next();
                let value = Self::scalar(t.pos, text)?;
                Ok(self.m.constant(value))
            }
            Tok::LParen => self.tuple(),
            Tok::Ident(word) => match word.as_str() {
                "True" | "False" => {
                    self.next();
                    Ok(self.m.constant(NDArray::scalar(word == "True")))
                }
                "meta" => {
                    self.next();
                    let k = self.meta_index()?;
                    self.meta_constant(t.pos, k)
                }
                "fn" => {
                    self.next();
                    self.function_rest(t.pos)
                }
                w if (w.starts_with("inf") || w.starts_with("nan"))
                    && self.peek_n(1).tok != Tok::LParen =>
                {
                    self.next();
                    let value = Self::scalar(t.pos, w)?;
                    Ok(self.m.constant(value))
                }
                _ => self.op_call(t.pos, word),
            },
            _ => Err(self.unexpected("an expression")),
        }
    }

    fn tuple(&mut self) -> Result<ExprId> {
        let open = self.next().pos;
        let mut fields = Vec::new();
        let mut trailing_comma = false;
        while self.peek().tok != Tok::RParen {
            fields.push(self.expr()?);
            trailing_comma = false;
            if self.peek().tok != Tok::RParen {
                self.expect(Tok::Comma, "`,` or `)` in a tuple")?;
                trailing_comma = true;
            }
        }
        self.next();
        if fields.len() == 1 && !trailing_comma {
            return Ok(fields[0]);
        }
        self.m.tuple(&fields).map_err(at(open))
    }

    fn op_call(&mut self, pos: Pos, name: &str) -> Result<ExprId> {
        self.next();
        if self.peek().tok != Tok::LParen {
            return Err(self.unexpected(&format!("`(` after `{name}` (an op call)")));
        }
        let (args, attrs) = self.call_args(&format!("`{name}`"), true)?;
        let op = self.registry.make(name, attrs).map_err(|e| match e {
            Error::UnknownOp(n) => pos.error(format!("unknown op `{n}`")),
            e => pos.error(e.to_string()),
        })?;
        // `Module::call` refuses results over the size limit, as for written types.
        self.m.call(op, &args).map_err(at(pos))
    }

    fn meta_constant(&mut self, pos: Pos, k: usize) -> Result<ExprId> {
        if let Some(&id) = self.meta_nodes.get(&k) {
            return Ok(id);
        }
        let Some(value) = self.meta_values.get(&k).cloned() else {
            return Err(pos.error(if self.has_metadata {
                format!("meta[relay.Constant][{k}] is not defined in the #[metadata] section")
            } else {
                format!(
                    "meta[relay.Constant][{k}] has no value: the text has no #[metadata] section \
                     (print with show_meta_data to include constants)"
                )
            }));
        };
        let id = self.m.constant(value);
        self.meta_nodes.insert(k, id);
        Ok(id)
    }

    /// A scalar literal: `1f`, `0.5` (float32), `1f16`, `3` (int32), `3i64`, `-inff`.
    fn scalar(pos: Pos, text: &str) -> Result<NDArray> {
        let lit = split_literal(text);
        let dtype = match lit.suffix {
            "" if lit.float_like => DType::F32,
            "" => DType::I32,
            "f" | "f32" => DType::F32,
            "f16" => DType::F16,
            "i8" => DType::I8,
            "u8" => DType::U8,
            "i32" => DType::I32,
            "i64" => DType::I64,
            "f64" => DType::F64,
            "bf16" => DType::BF16,
            "i16" => DType::I16,
            "u16" => DType::U16,
            "u32" => DType::U32,
            "u64" => DType::U64,
            s => {
                return Err(pos.error(format!(
                    "unknown literal suffix `{s}` in `{text}` (expected f, f16, f64, bf16, i8, u8, i16, u16, i32, u32, i64 or u64)"
                )));
            }
        };
        let bad = || pos.error(format!("`{text}` is not a valid {dtype} literal"));
        match dtype {
            DType::F32 => lit
                .num
                .parse::<f32>()
                .map(NDArray::scalar)
                .map_err(|_| bad()),
            DType::F16 => lit
                .num
                .parse::<f32>()
                .map(|x| NDArray::scalar(f16::from_f32(x)))
                .map_err(|_| bad()),
            DType::F64 | DType::BF16 => lit
                .num
                .parse::<f64>()
                .map_err(|_| bad())
                .and_then(|x| NDArray::new(vec![], Data::from_f64(dtype, [x])).map_err(at(pos))),
            _ if lit.float_like => Err(pos.error(format!("`{text}` is not an integer"))),
            DType::U64 => {
                let v = lit.num.parse::<u64>().map_err(|_| bad())?;
                NDArray::new(vec![], Data::U64(vec![v])).map_err(at(pos))
            }
            _ => {
                let v = lit.num.parse::<i64>().map_err(|_| bad())?;
                if !int_fits(dtype, v) {
                    return Err(pos.error(format!("integer literal `{text}` does not fit {dtype}")));
                }
                NDArray::new(vec![], Data::from_i64(dtype, [v])).map_err(at(pos))
            }
        }
    }

    /// An attribute value; `None` for the `None` keyword (an absent attribute).
    fn attr_value(&mut self) -> Result<Option<AttrValue>> {
        self.enter()?;
        let t = self.next();
        let v = match &t.tok {
            Tok::Number(text) => Some(Self::attr_number(t.pos, text)?),
            Tok::Str(s) => Some(AttrValue::Str(s.clone())),
            Tok::Ident(w) if w == "True" || w == "False" => Some(AttrValue::Bool(w == "True")),
            Tok::Ident(w) if w == "None" => None,
            Tok::Ident(w) if w.starts_with("inf") || w.starts_with("nan") => {
                Some(Self::attr_number(t.pos, w)?)
            }
            Tok::LBracket => {
                let mut items = Vec::new();
                while self.peek().tok != Tok::RBracket {
                    let item_pos = self.peek().pos;
                    match self.attr_value()? {
                        Some(v) => items.push(v),
                        None => return Err(item_pos.error("`None` cannot be an element of a list")),
                    }
                    if self.peek().tok != Tok::RBracket {
                        self.expect(Tok::Comma, "`,` or `]` in a list")?;
                    }
                }
                self.next();
                Some(AttrValue::List(items))
            }
            other => {
                return Err(t.pos.error(format!(
                    "expected an attribute value (a number, string, True, False, None or a list), found {other}"
                )));
            }
        };
        self.leave();
        Ok(v)
    }

    fn attr_number(pos: Pos, text: &str) -> Result<AttrValue> {
        let lit = split_literal(text);
        let float = match lit.suffix {
            "" => lit.float_like,
            "f" | "f16" | "bf16" | "f32" | "f64" => true,
            "i8" | "u8" | "i16" | "u16" | "i32" | "u32" | "i64" | "u64" if !lit.float_like => false,
            _ => return Err(pos.error(format!("`{text}` is not a valid attribute number"))),
        };
        if float {
            lit.num
                .parse::<f64>()
                .map(AttrValue::Float)
                .map_err(|_| pos.error(format!("`{text}` is not a valid number")))
        } else {
            lit.num
                .parse::<i64>()
                .map(AttrValue::Int)
                .map_err(|_| pos.error(format!("integer `{text}` does not fit int64")))
        }
    }

    fn ty(&mut self) -> Result<Type> {
        self.enter()?;
        let t = self.next();
        let ty = match &t.tok {
            Tok::Ident(w) if w == "Tensor" => {
                self.expect(Tok::LBracket, "`[` after `Tensor`")?;
                let shape_pos = self.expect(Tok::LParen, "a shape such as `(1, 3)`")?;
                let mut shape = Vec::new();
                while self.peek().tok != Tok::RParen {
                    shape.push(self.index("a dimension")?.1);
                    if self.peek().tok != Tok::RParen {
                        self.expect(Tok::Comma, "`,` or `)` in a shape")?;
                    }
                }
                self.next();
                if TensorType::new(shape.clone(), DType::F32).is_oversized() {
                    return Err(shape_pos
                        .error(format!("shape {} has too many elements", fmt_shape(&shape))));
                }
                self.expect(Tok::Comma, "`,` and a dtype after the shape")?;
                let dtype = self.dtype()?;
                self.expect(Tok::RBracket, "`]` to close the tensor type")?;
                Type::tensor(shape, dtype)
            }
            Tok::Ident(w) if w == "fn" => {
                self.expect(Tok::LParen, "`(` after `fn`")?;
                let mut params = Vec::new();
                while self.peek().tok != Tok::RParen {
                    params.push(self.ty()?);
                    if self.peek().tok != Tok::RParen {
                        self.expect(Tok::Comma, "`,` or `)` in a function type")?;
                    }
                }
                self.next();
                self.expect(Tok::Arrow, "`->` and the result type")?;
                let ret = Box::new(self.ty()?);
                Type::Func(FuncType { params, ret })
            }
            Tok::Ident(w) => Type::tensor([], Self::dtype_named(t.pos, w)?),
            Tok::LParen => {
                let mut fields = Vec::new();
                let mut trailing_comma = false;
                while self.peek().tok != Tok::RParen {
                    fields.push(self.ty()?);
                    trailing_comma = false;
                    if self.peek().tok != Tok::RParen {
                        self.expect(Tok::Comma, "`,` or `)` in a tuple type")?;
                        trailing_comma = true;
                    }
                }
                self.next();
                if fields.len() == 1 && !trailing_comma {
                    fields.remove(0)
                } else {
                    Type::Tuple(fields)
                }
            }
            other => return Err(t.pos.error(format!("expected a type, found {other}"))),
        };
        self.leave();
        Ok(ty)
    }

    fn dtype(&mut self) -> Result<DType> {
        let t = self.next();
        match &t.tok {
            Tok::Ident(w) => Self::dtype_named(t.pos, w),
            other => Err(t
                .pos
                .error(format!("expected a dtype such as `float32`, found {other}"))),
        }
    }

    fn dtype_named(pos: Pos, name: &str) -> Result<DType> {
        name.parse::<DType>().map_err(|_| {
            pos.error(format!(
                "unknown type or dtype `{name}` (kiln supports {})",
                DType::ALL.map(DType::name).join(", ")
            ))
        })
    }
}
