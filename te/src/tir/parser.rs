//! Reads the loop-IR text form written by [`printer`](super::printer) back into a
//! [`PrimFunc`]. Errors carry a 1-based `line:col`; no input makes it panic (nesting is
//! limited so deep input cannot overflow the stack). `//` starts a comment.
//!
//! Variables are declared where they are bound (`for`, `let`) and buffers where they
//! are declared (parameters, `allocate`); a later binding of the same name with the same
//! type refers to the same variable. Scoping itself is checked by the verifier.

use std::collections::HashMap;

use kiln_ir::DType;

use super::expr::{BinOp, Expr, Intrinsic};
use super::func::{PrimFunc, VarDecl};
use super::microkernel::{KernelCall, MicroKernel, Operand};
use super::printer::is_name_char;
use super::stmt::{ForKind, Stmt, ThreadAxis};
use super::types::{Buffer, BufferId, Scope, ValueType, VarId};
use crate::error::{Error, Result};

/// Deepest nesting of statements plus expressions the parser accepts.
pub const MAX_DEPTH: usize = 200;

/// Parses one function.
pub fn parse(text: &str) -> Result<PrimFunc> {
    let tokens = lex(text)?;
    let mut p = Parser {
        tokens,
        pos: 0,
        depth: 0,
        buffers: vec![],
        buffer_names: HashMap::new(),
        vars: vec![],
        var_names: HashMap::new(),
    };
    p.function()
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Local(String),
    Global(String),
    Num(String),
    Punct(&'static str),
    Eof,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
    col: usize,
}

const PUNCT: [&str; 23] = [
    "==", "!=", "<=", ">=", "&&", "||", "(", ")", "[", "]", "{", "}", ",", ":", "=", "<", ">", "+",
    "-", "*", "/", "!", ";",
];

fn err(line: usize, col: usize, message: impl Into<String>) -> Error {
    Error::Parse {
        line,
        col,
        message: message.into(),
    }
}

fn lex(text: &str) -> Result<Vec<Token>> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = vec![];
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    while i < chars.len() {
        let c = chars[i];
        let (tl, tc) = (line, col);
        let advance = |i: &mut usize, col: &mut usize, n: usize| {
            *i += n;
            *col += n;
        };
        if c == '\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            advance(&mut i, &mut col, 1);
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                advance(&mut i, &mut col, 1);
            }
            continue;
        }
        let start = i;
        let tok = if c == '%' || c == '@' {
            advance(&mut i, &mut col, 1);
            while i < chars.len() && is_name_char(chars[i]) {
                advance(&mut i, &mut col, 1);
            }
            let name: String = chars[start + 1..i].iter().collect();
            if name.is_empty() {
                return Err(err(tl, tc, format!("expected a name after `{c}`")));
            }
            if c == '%' {
                Tok::Local(name)
            } else {
                Tok::Global(name)
            }
        } else if c.is_ascii_alphabetic() || c == '_' {
            while i < chars.len() && is_name_char(chars[i]) {
                advance(&mut i, &mut col, 1);
            }
            Tok::Ident(chars[start..i].iter().collect())
        } else if c.is_ascii_digit() {
            while i < chars.len() && chars[i].is_ascii_digit() {
                advance(&mut i, &mut col, 1);
            }
            if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                advance(&mut i, &mut col, 1);
                while i < chars.len() && chars[i].is_ascii_digit() {
                    advance(&mut i, &mut col, 1);
                }
            }
            if matches!(chars.get(i), Some('e') | Some('E')) {
                let mut j = i + 1;
                if matches!(chars.get(j), Some('+') | Some('-')) {
                    j += 1;
                }
                if chars.get(j).is_some_and(|d| d.is_ascii_digit()) {
                    let n = j - i;
                    advance(&mut i, &mut col, n);
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        advance(&mut i, &mut col, 1);
                    }
                }
            }
            while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                advance(&mut i, &mut col, 1);
            }
            Tok::Num(chars[start..i].iter().collect())
        } else {
            let rest: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            match PUNCT.iter().find(|p| rest.starts_with(**p)) {
                Some(p) => {
                    advance(&mut i, &mut col, p.len());
                    Tok::Punct(p)
                }
                None => return Err(err(tl, tc, format!("unexpected character `{c}`"))),
            }
        };
        out.push(Token {
            tok,
            line: tl,
            col: tc,
        });
    }
    out.push(Token {
        tok: Tok::Eof,
        line,
        col,
    });
    Ok(out)
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Local(s) => format!("`%{s}`"),
        Tok::Global(s) => format!("`@{s}`"),
        Tok::Num(s) => format!("number `{s}`"),
        Tok::Punct(p) => format!("`{p}`"),
        Tok::Eof => "end of input".into(),
    }
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
    buffers: Vec<Buffer>,
    buffer_names: HashMap<String, BufferId>,
    vars: Vec<VarDecl>,
    var_names: HashMap<String, VarId>,
}

/// A literal's parsed value.
enum Lit {
    Int(i128, Option<DType>),
    Float(f64, Option<DType>),
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.tokens[self.pos].tok
    }

    fn peek2(&self) -> &Tok {
        &self.tokens[(self.pos + 1).min(self.tokens.len() - 1)].tok
    }

    fn here(&self) -> (usize, usize) {
        let t = &self.tokens[self.pos];
        (t.line, t.col)
    }

    fn error(&self, message: impl Into<String>) -> Error {
        let (l, c) = self.here();
        err(l, c, message)
    }

    fn unexpected(&self, what: &str) -> Error {
        self.error(format!("expected {what}, found {}", describe(self.peek())))
    }

    fn bump(&mut self) -> Tok {
        let t = self.tokens[self.pos].tok.clone();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if *q == p)
    }

    fn is_ident(&self, s: &str) -> bool {
        matches!(self.peek(), Tok::Ident(q) if q == s)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        if self.is_punct(p) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, p: &str) -> Result<()> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{p}`")))
        }
    }

    fn expect_ident(&mut self, s: &str) -> Result<()> {
        if self.is_ident(s) {
            self.bump();
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{s}`")))
        }
    }

    fn ident(&mut self, what: &str) -> Result<String> {
        match self.peek() {
            Tok::Ident(s) => {
                let s = s.clone();
                self.bump();
                Ok(s)
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn local(&mut self, what: &str) -> Result<String> {
        match self.peek() {
            Tok::Local(s) => {
                let s = s.clone();
                self.bump();
                Ok(s)
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(format!("nesting deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn signed_int(&mut self, what: &str) -> Result<i64> {
        let neg = self.eat_punct("-");
        let (l, c) = self.here();
        match self.bump() {
            Tok::Num(s) => match parse_number(&s) {
                Some(Lit::Int(v, None)) => {
                    let v = if neg { -v } else { v };
                    i64::try_from(v)
                        .map_err(|_| err(l, c, format!("{what} {v} does not fit in int64")))
                }
                _ => Err(err(
                    l,
                    c,
                    format!("expected an integer for {what}, found `{s}`"),
                )),
            },
            t => Err(err(
                l,
                c,
                format!("expected an integer for {what}, found {}", describe(&t)),
            )),
        }
    }

    fn value_type(&mut self) -> Result<ValueType> {
        let (l, c) = self.here();
        let name = self.ident("a type")?;
        ValueType::parse(&name).ok_or_else(|| err(l, c, format!("unknown type `{name}`")))
    }

    fn dtype(&mut self) -> Result<DType> {
        let (l, c) = self.here();
        let name = self.ident("a dtype")?;
        name.parse::<DType>().map_err(|e| err(l, c, e.to_string()))
    }

    fn function(&mut self) -> Result<PrimFunc> {
        self.expect_ident("primfn")?;
        let name = match self.peek().clone() {
            Tok::Global(n) => {
                self.bump();
                n
            }
            _ => return Err(self.unexpected("a function name `@name`")),
        };
        self.expect_punct("(")?;
        let mut params = vec![];
        let mut num_inputs = 0;
        let mut seen_output = false;
        if !self.is_punct(")") {
            loop {
                let is_out = if self.is_ident("out") {
                    self.bump();
                    true
                } else {
                    false
                };
                if !is_out && seen_output {
                    return Err(self.error("inputs must come before outputs (`out`)"));
                }
                seen_output |= is_out;
                let (l, c) = self.here();
                let id = self.buffer_decl()?;
                if params.contains(&id) {
                    return Err(err(l, c, "parameter declared twice"));
                }
                params.push(id);
                if !is_out {
                    num_inputs += 1;
                }
                if !self.eat_punct(",") {
                    break;
                }
            }
        }
        self.expect_punct(")")?;
        let body = self.block()?;
        if *self.peek() != Tok::Eof {
            return Err(self.unexpected("end of input after the function"));
        }
        Ok(PrimFunc {
            name,
            params,
            num_inputs,
            buffers: std::mem::take(&mut self.buffers),
            vars: std::mem::take(&mut self.vars),
            body,
        })
    }

    /// `%name: Buffer[(shape), dtype, scope]`; declares (or re-finds) the buffer.
    fn buffer_decl(&mut self) -> Result<BufferId> {
        let (l, c) = self.here();
        let name = self.local("a buffer name `%name`")?;
        self.expect_punct(":")?;
        self.expect_ident("Buffer")?;
        self.expect_punct("[")?;
        self.expect_punct("(")?;
        let mut shape = vec![];
        if !self.is_punct(")") {
            loop {
                let d = self.signed_int("a dimension")?;
                let d = usize::try_from(d)
                    .map_err(|_| self.error(format!("negative dimension {d}")))?;
                shape.push(d);
                if !self.eat_punct(",") {
                    break;
                }
            }
        }
        self.expect_punct(")")?;
        self.expect_punct(",")?;
        let dtype = self.dtype()?;
        self.expect_punct(",")?;
        let (sl, sc) = self.here();
        let scope_name = self.ident("a scope (global, local, shared)")?;
        let scope = Scope::from_name(&scope_name).ok_or_else(|| {
            err(
                sl,
                sc,
                format!("unknown scope `{scope_name}` (global, local, shared)"),
            )
        })?;
        self.expect_punct("]")?;
        let buffer = Buffer {
            name: name.clone(),
            shape,
            dtype,
            scope,
        };
        if let Some(&id) = self.buffer_names.get(&name) {
            if self.buffers[id.index()] != buffer {
                return Err(err(
                    l,
                    c,
                    format!("buffer %{name} declared again with another type"),
                ));
            }
            return Ok(id);
        }
        let id = BufferId(self.buffers.len() as u32);
        self.buffers.push(buffer);
        self.buffer_names.insert(name, id);
        Ok(id)
    }

    /// Declares (or re-finds) the variable bound by a `for` or `let`.
    fn bind_var(&mut self, name: String, ty: ValueType, line: usize, col: usize) -> Result<VarId> {
        if let Some(&id) = self.var_names.get(&name) {
            let old = self.vars[id.index()].ty;
            if old != ty {
                return Err(err(
                    line,
                    col,
                    format!("variable %{name} bound again as {ty}, was {old}"),
                ));
            }
            return Ok(id);
        }
        let id = VarId(self.vars.len() as u32);
        self.vars.push(VarDecl {
            name: name.clone(),
            ty,
        });
        self.var_names.insert(name, id);
        Ok(id)
    }

    fn block(&mut self) -> Result<Stmt> {
        self.enter()?;
        self.expect_punct("{")?;
        let mut stmts = vec![];
        while !self.is_punct("}") {
            if *self.peek() == Tok::Eof {
                return Err(self.unexpected("`}`"));
            }
            stmts.push(self.stmt()?);
        }
        self.bump();
        self.leave();
        Ok(if stmts.len() == 1 {
            stmts.pop().expect("one statement")
        } else {
            Stmt::Seq(stmts)
        })
    }

    fn stmt(&mut self) -> Result<Stmt> {
        let (l, c) = self.here();
        match self.peek().clone() {
            Tok::Local(_) => {
                let buffer = self.buffer_ref()?;
                self.expect_punct("[")?;
                let indices = self.expr_list("]")?;
                self.expect_punct("=")?;
                let value = self.expr()?;
                Ok(Stmt::Store {
                    buffer,
                    indices,
                    value,
                })
            }
            Tok::Ident(kw) => match kw.as_str() {
                "for" => self.for_stmt(ForKind::Serial),
                "parallel" | "vectorized" | "unrolled" => {
                    self.bump();
                    if !self.is_ident("for") {
                        return Err(self.unexpected("`for`"));
                    }
                    let kind = match kw.as_str() {
                        "parallel" => ForKind::Parallel,
                        "vectorized" => ForKind::Vectorized,
                        _ => ForKind::Unrolled,
                    };
                    self.for_stmt(kind)
                }
                "launch_thread" => {
                    self.bump();
                    let (al, ac) = self.here();
                    let axis = self.ident("a thread axis (blockIdx.x .. threadIdx.z)")?;
                    let axis = ThreadAxis::from_name(&axis)
                        .ok_or_else(|| err(al, ac, format!("unknown thread axis `{axis}`")))?;
                    self.loop_rest(ForKind::Thread(axis))
                }
                "allocate" => {
                    self.bump();
                    let buffer = self.buffer_decl()?;
                    let body = self.block()?;
                    Ok(Stmt::allocate(buffer, body))
                }
                "if" => {
                    self.bump();
                    self.expect_punct("(")?;
                    let cond = self.expr()?;
                    self.expect_punct(")")?;
                    let then = self.block()?;
                    let else_ = if self.is_ident("else") {
                        self.bump();
                        Some(Box::new(self.block()?))
                    } else {
                        None
                    };
                    Ok(Stmt::If {
                        cond,
                        then: Box::new(then),
                        else_,
                    })
                }
                "let" => {
                    self.bump();
                    let (vl, vc) = self.here();
                    let name = self.local("a variable name `%name`")?;
                    self.expect_punct(":")?;
                    let ty = self.value_type()?;
                    self.expect_punct("=")?;
                    let value = self.expr()?;
                    let var = self.bind_var(name, ty, vl, vc)?;
                    let body = self.block()?;
                    Ok(Stmt::let_(var, value, body))
                }
                "barrier" => {
                    self.bump();
                    self.expect_punct("(")?;
                    self.expect_punct(")")?;
                    Ok(Stmt::Barrier)
                }
                "microkernel" => {
                    self.bump();
                    self.microkernel()
                }
                _ => Err(err(l, c, format!("expected a statement, found `{kw}`"))),
            },
            t => Err(err(
                l,
                c,
                format!("expected a statement, found {}", describe(&t)),
            )),
        }
    }

    /// `NAME(size=N, ..., %buf[base, ...] axes(D0, D1, ...), ...)` after `microkernel`.
    fn microkernel(&mut self) -> Result<Stmt> {
        let (l, c) = self.here();
        let name = self.ident("a micro-kernel name")?;
        self.expect_punct("(")?;
        let mut sizes = vec![];
        let mut operands = vec![];
        loop {
            if let Tok::Local(_) = self.peek() {
                let buffer = self.buffer_ref()?;
                self.expect_punct("[")?;
                let base = self.expr_list("]")?;
                self.expect_ident("axes")?;
                self.expect_punct("(")?;
                let mut axes = vec![];
                loop {
                    let d = self.signed_int("an axis")?;
                    axes.push(
                        usize::try_from(d)
                            .map_err(|_| err(l, c, format!("axis {d} is negative")))?,
                    );
                    if !self.eat_punct(",") {
                        break;
                    }
                }
                self.expect_punct(")")?;
                operands.push(Operand { buffer, base, axes });
            } else {
                let key = self.ident("a size name or an operand `%buffer[...]`")?;
                self.expect_punct("=")?;
                sizes.push((key, self.signed_int("a size")?));
            }
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct(")")?;
        let kernel =
            MicroKernel::from_parts(&name, &sizes).map_err(|e| err(l, c, e.to_string()))?;
        Ok(Stmt::MicroKernel(Box::new(KernelCall { kernel, operands })))
    }

    fn for_stmt(&mut self, kind: ForKind) -> Result<Stmt> {
        self.expect_ident("for")?;
        self.loop_rest(kind)
    }

    /// `(%var[: type], min, extent) { body }`.
    fn loop_rest(&mut self, kind: ForKind) -> Result<Stmt> {
        self.expect_punct("(")?;
        let (vl, vc) = self.here();
        let name = self.local("a loop variable `%name`")?;
        let ty = if self.eat_punct(":") {
            self.value_type()?
        } else {
            ValueType::I32
        };
        self.expect_punct(",")?;
        let min = self.signed_int("the loop start")?;
        self.expect_punct(",")?;
        let extent = self.signed_int("the loop extent")?;
        self.expect_punct(")")?;
        let var = self.bind_var(name, ty, vl, vc)?;
        let body = self.block()?;
        Ok(Stmt::for_(var, min, extent, kind, body))
    }

    fn buffer_ref(&mut self) -> Result<BufferId> {
        let (l, c) = self.here();
        let name = self.local("a buffer")?;
        self.buffer_names
            .get(&name)
            .copied()
            .ok_or_else(|| err(l, c, format!("unknown buffer %{name}")))
    }

    fn expr_list(&mut self, close: &str) -> Result<Vec<Expr>> {
        let mut v = vec![];
        if !self.is_punct(close) {
            loop {
                v.push(self.expr()?);
                if !self.eat_punct(",") {
                    break;
                }
            }
        }
        self.expect_punct(close)?;
        Ok(v)
    }

    fn expr(&mut self) -> Result<Expr> {
        self.enter()?;
        let e = self.binary(1)?;
        self.leave();
        Ok(e)
    }

    fn infix(&self) -> Option<BinOp> {
        match self.peek() {
            Tok::Punct(p) => BinOp::ALL.into_iter().find(|op| op.symbol() == Some(*p)),
            _ => None,
        }
    }

    fn binary(&mut self, min_prec: u8) -> Result<Expr> {
        let mut lhs = self.unary()?;
        while let Some(op) = self.infix() {
            let p = op.precedence();
            if p < min_prec {
                break;
            }
            self.bump();
            self.enter()?;
            let rhs = self.binary(p + 1)?;
            self.leave();
            lhs = Expr::binary(op, lhs, rhs);
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr> {
        if self.eat_punct("!") {
            self.enter()?;
            let x = self.unary()?;
            self.leave();
            return Ok(!x);
        }
        if self.is_punct("-") {
            self.bump();
            return match self.peek().clone() {
                Tok::Num(_) | Tok::Ident(_) => {
                    let (l, c) = self.here();
                    match self.literal()? {
                        Some(lit) => lit_expr(lit, true).map_err(|m| err(l, c, m)),
                        None => Err(err(l, c, "expected a number after `-`")),
                    }
                }
                _ => Err(self.unexpected("a number after `-`")),
            };
        }
        self.primary()
    }

    /// A numeric literal token (`5i64`, `1.5f16`, `inf`, `nanf16`), if the next token is one.
    fn literal(&mut self) -> Result<Option<Lit>> {
        let (l, c) = self.here();
        let lit = match self.peek() {
            Tok::Num(s) => parse_number(s).ok_or_else(|| err(l, c, format!("bad number `{s}`")))?,
            Tok::Ident(s) => match special_float(s) {
                Some(lit) => lit,
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        self.bump();
        Ok(Some(lit))
    }

    fn primary(&mut self) -> Result<Expr> {
        let (l, c) = self.here();
        if let Some(lit) = self.literal()? {
            return lit_expr(lit, false).map_err(|m| err(l, c, m));
        }
        match self.peek().clone() {
            Tok::Punct("(") => {
                self.bump();
                let e = self.expr()?;
                self.expect_punct(")")?;
                Ok(e)
            }
            Tok::Local(name) => {
                if *self.peek2() == Tok::Punct("[") {
                    let buffer = self.buffer_ref()?;
                    self.bump();
                    let indices = self.expr_list("]")?;
                    Ok(Expr::Load { buffer, indices })
                } else {
                    self.bump();
                    self.var_names
                        .get(&name)
                        .map(|&v| Expr::Var(v))
                        .ok_or_else(|| err(l, c, format!("unknown variable %{name}")))
                }
            }
            Tok::Ident(name) => {
                self.bump();
                match name.as_str() {
                    "true" => return Ok(Expr::Bool(true)),
                    "false" => return Ok(Expr::Bool(false)),
                    _ => {}
                }
                self.expect_punct("(")?;
                self.call(&name, l, c)
            }
            t => Err(err(
                l,
                c,
                format!("expected an expression, found {}", describe(&t)),
            )),
        }
    }

    /// The arguments and closing parenthesis of a call-style expression.
    fn call(&mut self, name: &str, l: usize, c: usize) -> Result<Expr> {
        let binop = BinOp::ALL
            .into_iter()
            .find(|op| op.call_name() == Some(name));
        if let Some(op) = binop {
            let a = self.expr()?;
            self.expect_punct(",")?;
            let b = self.expr()?;
            self.expect_punct(")")?;
            return Ok(Expr::binary(op, a, b));
        }
        if let Some(intrinsic) = Intrinsic::from_name(name) {
            let args = self.expr_list(")")?;
            if args.len() != intrinsic.arity() {
                return Err(err(
                    l,
                    c,
                    format!(
                        "`{name}` takes {} argument(s), found {}",
                        intrinsic.arity(),
                        args.len()
                    ),
                ));
            }
            return Ok(Expr::Call { intrinsic, args });
        }
        match name {
            "select" => {
                let args = self.expr_list(")")?;
                let [cond, then, else_]: [Expr; 3] = args
                    .try_into()
                    .map_err(|_| err(l, c, "`select` takes 3 arguments"))?;
                Ok(Expr::select(cond, then, else_))
            }
            "cast" => {
                let to = self.dtype()?;
                self.expect_punct(",")?;
                let value = self.expr()?;
                self.expect_punct(")")?;
                Ok(value.cast(to))
            }
            "ramp" => {
                let base = self.expr()?;
                self.expect_punct(",")?;
                let stride = self.expr()?;
                self.expect_punct(",")?;
                let lanes = self.lanes()?;
                self.expect_punct(")")?;
                Ok(Expr::ramp(base, stride, lanes))
            }
            "broadcast" => {
                let value = self.expr()?;
                self.expect_punct(",")?;
                let lanes = self.lanes()?;
                self.expect_punct(")")?;
                Ok(Expr::broadcast(value, lanes))
            }
            _ => Err(err(l, c, format!("unknown function `{name}`"))),
        }
    }

    fn lanes(&mut self) -> Result<u32> {
        let (l, c) = self.here();
        let v = self.signed_int("the lane count")?;
        u32::try_from(v).map_err(|_| err(l, c, format!("bad lane count {v}")))
    }
}

fn special_float(s: &str) -> Option<Lit> {
    let (v, rest) = if let Some(r) = s.strip_prefix("inf") {
        (f64::INFINITY, r)
    } else if let Some(r) = s.strip_prefix("nan") {
        (f64::NAN, r)
    } else {
        return None;
    };
    match rest {
        "" => Some(Lit::Float(v, None)),
        "f16" => Some(Lit::Float(v, Some(DType::F16))),
        "f32" => Some(Lit::Float(v, Some(DType::F32))),
        "f64" => Some(Lit::Float(v, Some(DType::F64))),
        "bf16" => Some(Lit::Float(v, Some(DType::BF16))),
        _ => None,
    }
}

/// Splits `12.5e3f16` into its number and suffix and parses both.
fn parse_number(s: &str) -> Option<Lit> {
    let mut split = s.len();
    for (k, ch) in s.char_indices() {
        let in_exponent = k > 0
            && matches!(ch, 'e' | 'E')
            && s[k + 1..].starts_with(|d: char| d.is_ascii_digit() || d == '+' || d == '-');
        if ch.is_ascii_alphabetic() && !in_exponent {
            split = k;
            break;
        }
    }
    let (num, suffix) = s.split_at(split);
    let suffix_ty = match suffix {
        "" => None,
        "f16" => Some(DType::F16),
        "f32" => Some(DType::F32),
        "i8" => Some(DType::I8),
        "u8" => Some(DType::U8),
        "i32" => Some(DType::I32),
        "i64" => Some(DType::I64),
        "f64" => Some(DType::F64),
        "bf16" => Some(DType::BF16),
        "i16" => Some(DType::I16),
        "u16" => Some(DType::U16),
        "u32" => Some(DType::U32),
        "u64" => Some(DType::U64),
        _ => return None,
    };
    let is_float_text = num.contains(['.', 'e', 'E']);
    if is_float_text || suffix_ty.is_some_and(|d| d.is_float()) {
        if suffix_ty.is_some_and(|d| !d.is_float()) {
            return None;
        }
        return num.parse::<f64>().ok().map(|v| Lit::Float(v, suffix_ty));
    }
    num.parse::<i128>().ok().map(|v| Lit::Int(v, suffix_ty))
}

fn lit_expr(lit: Lit, negate: bool) -> std::result::Result<Expr, String> {
    match lit {
        Lit::Int(v, ty) => {
            let v = if negate { -v } else { v };
            let dtype = ty.unwrap_or(DType::I32);
            let v = i64::try_from(v).map_err(|_| format!("integer {v} does not fit in int64"))?;
            let (lo, hi) = int_range(dtype);
            if v < lo || v > hi {
                return Err(format!("integer {v} out of range for {dtype}"));
            }
            Ok(Expr::Int { value: v, dtype })
        }
        Lit::Float(v, ty) => Ok(Expr::Float {
            value: if negate { -v } else { v },
            dtype: ty.unwrap_or(DType::F32),
        }),
    }
}

pub use super::semantics::int_range;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_a_small_function() {
        let f = parse(
            "// comment\nprimfn @k(%a: Buffer[(4), float32, global], out %b: Buffer[(4), float32, global]) {\n  \
             vectorized for (%i, 0, 4) {\n    %b[%i] = %a[%i] * 2.0 + -1.5e0\n  }\n}\n",
        )
        .unwrap();
        assert_eq!(f.name, "k");
        assert_eq!(f.num_inputs, 1);
        assert_eq!(f.params.len(), 2);
        assert!(matches!(
            f.body,
            Stmt::For {
                kind: ForKind::Vectorized,
                extent: 4,
                ..
            }
        ));
    }

    #[test]
    fn literals() {
        assert!(matches!(
            parse_number("5i64"),
            Some(Lit::Int(5, Some(DType::I64)))
        ));
        assert!(
            matches!(parse_number("1.5f16"), Some(Lit::Float(v, Some(DType::F16))) if v == 1.5)
        );
        assert!(matches!(parse_number("1e-7"), Some(Lit::Float(v, None)) if v == 1e-7));
        assert!(
            matches!(parse_number("2e3f16"), Some(Lit::Float(v, Some(DType::F16))) if v == 2000.0)
        );
        assert!(parse_number("5q").is_none());
        assert!(parse_number("1.5i8").is_none());
        assert!(lit_expr(Lit::Int(300, Some(DType::U8)), false).is_err());
        assert_eq!(
            lit_expr(Lit::Int(128, Some(DType::I8)), true).unwrap(),
            Expr::int_of(-128, DType::I8)
        );
    }

    #[test]
    fn errors_have_positions() {
        assert_eq!(
            parse_err("primfn @k() {\n  %x[0] = 1\n}"),
            "parse error at 2:3: unknown buffer %x"
        );
        assert_eq!(
            parse_err("primfn @k() {\n  for (%i, 0, 4) { barrier( }\n}"),
            "parse error at 2:29: expected `)`, found `}`"
        );
        assert_eq!(
            parse_err("primfn @k() { $ }"),
            "parse error at 1:15: unexpected character `$`"
        );
        assert!(
            parse_err("primfn @k(%a: Buffer[(4), complex64, global]) {}").contains("complex64")
        );
        assert!(parse_err("primfn @k(out %a: Buffer[(4), float32, global], %b: Buffer[(4), float32, global]) {}").contains("before outputs"));
        let deep = format!(
            "primfn @k(out %a: Buffer[(4), int32, global]) {{ %a[0] = {}1{} }}",
            "(".repeat(5000),
            ")".repeat(5000)
        );
        assert!(parse_err(&deep).contains("nesting deeper"));
    }
}
