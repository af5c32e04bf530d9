//! Expressions: immediates, variables, loads and stores (flat int32 element indices; the
//! verifier has proved every access in bounds and codegen refuses buffers past
//! `i32::MAX` elements, so no partial sum overflows), arithmetic with the loop IR's
//! integer and float semantics, comparisons, lazy `select`, and casts.

use kiln_executor::Result;
use kiln_ir::DType;
use kiln_te::tir::semantics::round_float;
use kiln_te::tir::{BinOp, BufferId, Expr};
use rspirv::spirv::{Decoration, SelectionControl, StorageClass, Word};

use super::{Gen, Val};

impl Gen<'_> {
    pub(crate) fn as_bool(&self, v: Val) -> Result<Val> {
        if v.dtype == DType::Bool {
            Ok(v)
        } else {
            Err(self.err(format!("condition of dtype {}", v.dtype)))
        }
    }

    /// Marks float result `id` as never fused with its neighbours.
    pub(super) fn exact(&mut self, id: Word) -> Word {
        self.b.decorate(id, Decoration::NoContraction, []);
        id
    }

    /// Re-wraps an int8/uint8/int16/uint16/uint32 value and rounds a float16 or
    /// bfloat16 value (held as float32) to its width, the interpreter's per-operation
    /// narrowing; other dtypes pass unchanged.
    pub(crate) fn narrow(&mut self, v: Val) -> Result<Val> {
        let id = match v.dtype {
            DType::I8 => {
                let t = self.ty(DType::I32)?;
                let s = self.const_i32(24);
                let l = self.b.shift_left_logical(t, None, v.id, s);
                let l = self.ok(l)?;
                let r = self.b.shift_right_arithmetic(t, None, l, s);
                self.ok(r)?
            }
            DType::I16 => {
                let t = self.ty(DType::I32)?;
                let s = self.const_i32(16);
                let l = self.b.shift_left_logical(t, None, v.id, s);
                let l = self.ok(l)?;
                let r = self.b.shift_right_arithmetic(t, None, l, s);
                self.ok(r)?
            }
            DType::U8 | DType::U16 | DType::U32 => {
                let t = self.ty(v.dtype)?;
                let mask = match v.dtype {
                    DType::U8 => 0xff,
                    DType::U16 => 0xffff,
                    _ => 0xffff_ffff,
                };
                let m = self.const_int(mask, v.dtype)?;
                let r = self.b.bitwise_and(t, None, v.id, m);
                self.ok(r)?
            }
            DType::F16 => {
                let h = self.f16_ty()?;
                let f = self.ty(DType::F32)?;
                let x = self.b.f_convert(h, None, v.id);
                let x = self.ok(x)?;
                let r = self.b.f_convert(f, None, x);
                self.ok(r)?
            }
            DType::BF16 => {
                let bits = self.bf16_rounded_bits(v.id)?;
                let f = self.ty(DType::F32)?;
                let r = self.b.bitcast(f, None, bits);
                self.ok(r)?
            }
            _ => v.id,
        };
        Ok(Val { id, dtype: v.dtype })
    }

    /// The float32 bits (uint32) of float32 `x` rounded to bfloat16: the low 16 bits
    /// zero, rounded to nearest even in integer arithmetic (so the device's float
    /// modes play no part); a NaN keeps its upper bits and is made quiet, as
    /// `half::bf16::from_f32` does.
    fn bf16_rounded_bits(&mut self, x: Word) -> Result<Word> {
        let u = self.b.type_int(32, 0);
        let bool_t = self.ty(DType::Bool)?;
        let bits = self.b.bitcast(u, None, x);
        let bits = self.ok(bits)?;
        let (c16, one, half_down, high, quiet) = (
            self.const_u32(16),
            self.const_u32(1),
            self.const_u32(0x7fff),
            self.const_u32(0xffff_0000),
            self.const_u32(0x0040_0000),
        );
        let lsb = self.b.shift_right_logical(u, None, bits, c16);
        let lsb = self.ok(lsb)?;
        let lsb = self.b.bitwise_and(u, None, lsb, one);
        let lsb = self.ok(lsb)?;
        let r = self.b.i_add(u, None, bits, half_down);
        let r = self.ok(r)?;
        let r = self.b.i_add(u, None, r, lsb);
        let r = self.ok(r)?;
        let rounded = self.b.bitwise_and(u, None, r, high);
        let rounded = self.ok(rounded)?;
        let q = self.b.bitwise_or(u, None, bits, quiet);
        let q = self.ok(q)?;
        let q = self.b.bitwise_and(u, None, q, high);
        let q = self.ok(q)?;
        let nan = self.b.is_nan(bool_t, None, x);
        let nan = self.ok(nan)?;
        let r = self.b.select(u, None, nan, q, rounded);
        self.ok(r)
    }

    pub(crate) fn expr(&mut self, e: &Expr) -> Result<Val> {
        match e {
            Expr::Int { value, dtype } => {
                if !dtype.is_int() {
                    return Err(self.err(format!("integer immediate of dtype {dtype}")));
                }
                let v = kiln_te::tir::semantics::wrap_int(*value, *dtype);
                let id = self.const_int(v, *dtype)?;
                Ok(Val { id, dtype: *dtype })
            }
            Expr::Float { value, dtype } => {
                if !dtype.is_float() {
                    return Err(self.err(format!("float immediate of dtype {dtype}")));
                }
                if *dtype == DType::F16 {
                    self.f16_ty()?;
                }
                // Rounded once to the dtype, as the interpreter does.
                let id = self.const_float(round_float(*value, *dtype), *dtype)?;
                Ok(Val { id, dtype: *dtype })
            }
            Expr::Bool(b) => Ok(Val {
                id: self.const_bool(*b),
                dtype: DType::Bool,
            }),
            Expr::Var(var) => self
                .vars
                .get(var.index())
                .copied()
                .flatten()
                .ok_or_else(|| self.err(format!("{var} used outside its scope"))),
            Expr::Load { buffer, indices } => self.load(*buffer, indices),
            Expr::Binary { op, lhs, rhs } => {
                let a = self.expr(lhs)?;
                let b = self.expr(rhs)?;
                if a.dtype != b.dtype {
                    return Err(self.err(format!(
                        "operands of {op:?} differ ({} and {})",
                        a.dtype, b.dtype
                    )));
                }
                self.binary(*op, a, b)
            }
            Expr::Not(x) => {
                let v = self.expr(x)?;
                let v = self.as_bool(v)?;
                let t = self.ty(DType::Bool)?;
                let r = self.b.logical_not(t, None, v.id);
                Ok(Val {
                    id: self.ok(r)?,
                    dtype: DType::Bool,
                })
            }
            Expr::Select { cond, then, else_ } => self.select(cond, then, else_),
            Expr::Cast { to, value } => {
                let v = self.expr(value)?;
                self.cast(v, *to)
            }
            Expr::Call { intrinsic, args } => {
                let vals = args
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<Vec<_>>>()?;
                self.intrinsic(*intrinsic, vals)
            }
            Expr::Ramp { .. } | Expr::Broadcast { .. } => Err(self
                .err("vector values (ramp, broadcast): the GPU schedules are scalar per thread")),
        }
    }

    /// `cond ? then : else_`, evaluating only the chosen side when either side loads
    /// (a load the condition guards may be out of bounds); an `OpSelect` otherwise.
    fn select(&mut self, cond: &Expr, then: &Expr, else_: &Expr) -> Result<Val> {
        let c = self.expr(cond)?;
        let c = self.as_bool(c)?;
        if !has_load(then) && !has_load(else_) {
            let a = self.expr(then)?;
            let b = self.expr(else_)?;
            if a.dtype != b.dtype {
                return Err(self.err("select sides differ in dtype"));
            }
            let t = self.ty(a.dtype)?;
            let r = self.b.select(t, None, c.id, a.id, b.id);
            return Ok(Val {
                id: self.ok(r)?,
                dtype: a.dtype,
            });
        }
        let (merge, l_then, l_else) = (self.b.id(), self.b.id(), self.b.id());
        let r = self.b.selection_merge(merge, SelectionControl::NONE);
        self.ok(r)?;
        let r = self.b.branch_conditional(c.id, l_then, l_else, []);
        self.ok(r)?;
        self.start_block(l_then)?;
        let a = self.expr(then)?;
        let end_then = self.block;
        self.branch(merge)?;
        self.start_block(l_else)?;
        let b = self.expr(else_)?;
        let end_else = self.block;
        self.branch(merge)?;
        if a.dtype != b.dtype {
            return Err(self.err("select sides differ in dtype"));
        }
        self.start_block(merge)?;
        let t = self.ty(a.dtype)?;
        let r = self.b.phi(t, None, [(a.id, end_then), (b.id, end_else)]);
        Ok(Val {
            id: self.ok(r)?,
            dtype: a.dtype,
        })
    }

    /// A pointer to `buffer[indices]` and the buffer's dtype.
    fn pointer(&mut self, buffer: BufferId, indices: &[Expr]) -> Result<(Word, DType)> {
        let b = self
            .func
            .buffer(buffer)
            .ok_or_else(|| self.err(format!("access to unknown {buffer}")))?
            .clone();
        if indices.len() != b.rank() {
            return Err(self.err(format!(
                "{} indices for buffer {} of rank {}",
                indices.len(),
                b.name,
                b.rank()
            )));
        }
        let v = *self
            .buffers
            .get(&buffer)
            .ok_or_else(|| self.err(format!("buffer {} used outside its allocation", b.name)))?;
        let int = self.ty(DType::I32)?;
        let mut flat: Option<Word> = None;
        for (e, &ext) in indices.iter().zip(&b.shape) {
            let i = self.expr(e)?;
            let i = match i.dtype {
                DType::I32 | DType::I8 | DType::U8 | DType::I16 | DType::U16 => i.id,
                DType::I64 | DType::U64 | DType::U32 => {
                    let r = self.b.s_convert(int, None, i.id);
                    self.ok(r)?
                }
                other => return Err(self.err(format!("index of dtype {other}"))),
            };
            flat = Some(match flat {
                None => i,
                Some(acc) => {
                    let ext = self.const_i32(ext as i32);
                    let m = self.b.i_mul(int, None, acc, ext);
                    let m = self.ok(m)?;
                    let r = self.b.i_add(int, None, m, i);
                    self.ok(r)?
                }
            });
        }
        let flat = match flat {
            Some(f) => f,
            None => self.const_i32(0),
        };
        let ptr_t = self.b.type_pointer(None, v.class, v.elem);
        let chain = if v.class == StorageClass::StorageBuffer {
            let zero = self.const_i32(0);
            vec![zero, flat]
        } else {
            vec![flat]
        };
        let p = self.b.access_chain(ptr_t, None, v.var, chain);
        Ok((self.ok(p)?, b.dtype))
    }

    fn is_storage(&self, buffer: BufferId) -> bool {
        self.buffers
            .get(&buffer)
            .is_some_and(|v| v.class == StorageClass::StorageBuffer)
    }

    fn load(&mut self, buffer: BufferId, indices: &[Expr]) -> Result<Val> {
        let storage = self.is_storage(buffer);
        let (p, d) = self.pointer(buffer, indices)?;
        let t = self.ty(d)?;
        if !storage {
            let r = self.b.load(t, None, p, None, []);
            return Ok(Val {
                id: self.ok(r)?,
                dtype: d,
            });
        }
        let st = self.storage_ty_of(d)?;
        let raw = self.b.load(st, None, p, None, []);
        let raw = self.ok(raw)?;
        let id = match d {
            DType::F16 => {
                let r = self.b.f_convert(t, None, raw);
                self.ok(r)?
            }
            DType::I8 | DType::I16 => {
                let r = self.b.s_convert(t, None, raw);
                self.ok(r)?
            }
            DType::U32 => {
                let u = self.b.type_int(64, 0);
                let r = self.b.u_convert(u, None, raw);
                let r = self.ok(r)?;
                let r = self.b.bitcast(t, None, r);
                self.ok(r)?
            }
            DType::U8 | DType::U16 => {
                // OpUConvert yields an unsigned type; the value fits int32 as it is.
                let u = self.b.type_int(32, 0);
                let r = self.b.u_convert(u, None, raw);
                let r = self.ok(r)?;
                let r = self.b.bitcast(t, None, r);
                self.ok(r)?
            }
            DType::BF16 => {
                // The pattern is the upper half of the float32's bits.
                let u = self.b.type_int(32, 0);
                let r = self.b.u_convert(u, None, raw);
                let r = self.ok(r)?;
                let c16 = self.const_u32(16);
                let r = self.b.shift_left_logical(u, None, r, c16);
                let r = self.ok(r)?;
                let r = self.b.bitcast(t, None, r);
                self.ok(r)?
            }
            DType::Bool => {
                let zero = self.storage_zero(d)?;
                let r = self.b.i_not_equal(t, None, raw, zero);
                self.ok(r)?
            }
            _ => raw,
        };
        Ok(Val { id, dtype: d })
    }

    fn storage_ty_of(&mut self, d: DType) -> Result<Word> {
        Ok(match d {
            DType::F16 => self.f16_ty()?,
            DType::I8 | DType::U8 | DType::Bool => self.b.type_int(8, 0),
            DType::I16 | DType::U16 | DType::BF16 => self.int16_ty(d)?,
            DType::U32 => self.b.type_int(32, 0),
            _ => self.ty(d)?,
        })
    }

    /// The 8-bit zero.
    fn storage_zero(&mut self, d: DType) -> Result<Word> {
        let t = self.storage_ty_of(d)?;
        Ok(self.constant(t, 0, false))
    }

    pub(super) fn store(&mut self, buffer: BufferId, indices: &[Expr], v: Val) -> Result<()> {
        let storage = self.is_storage(buffer);
        let (p, d) = self.pointer(buffer, indices)?;
        if v.dtype != d {
            return Err(self.err(format!("store of {} to a {d} buffer", v.dtype)));
        }
        let value = if !storage {
            v.id
        } else {
            let st = self.storage_ty_of(d)?;
            match d {
                DType::F16 => {
                    let r = self.b.f_convert(st, None, v.id);
                    self.ok(r)?
                }
                DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::U32 => {
                    let r = self.b.u_convert(st, None, v.id);
                    self.ok(r)?
                }
                DType::BF16 => {
                    let bits = self.bf16_rounded_bits(v.id)?;
                    let u = self.b.type_int(32, 0);
                    let c16 = self.const_u32(16);
                    let r = self.b.shift_right_logical(u, None, bits, c16);
                    let r = self.ok(r)?;
                    let r = self.b.u_convert(st, None, r);
                    self.ok(r)?
                }
                DType::Bool => {
                    let one = self.constant(st, 1, false);
                    let zero = self.constant(st, 0, false);
                    let r = self.b.select(st, None, v.id, one, zero);
                    self.ok(r)?
                }
                _ => v.id,
            }
        };
        let r = self.b.store(p, value, None, []);
        self.ok(r)
    }

    fn binary(&mut self, op: BinOp, a: Val, b: Val) -> Result<Val> {
        let d = a.dtype;
        let bool_t = self.ty(DType::Bool)?;
        if op.is_comparison() {
            let (x, y, float) = match d {
                // On bools, compare as 0/1 integers.
                DType::Bool => (self.bool_to_int(a)?, self.bool_to_int(b)?, false),
                _ => (a.id, b.id, d.is_float()),
            };
            let unsigned = d == DType::U64;
            let b_ = &mut self.b;
            let r = match (op, float) {
                (BinOp::Lt, false) if unsigned => b_.u_less_than(bool_t, None, x, y),
                (BinOp::Le, false) if unsigned => b_.u_less_than_equal(bool_t, None, x, y),
                (BinOp::Gt, false) if unsigned => b_.u_greater_than(bool_t, None, x, y),
                (BinOp::Ge, false) if unsigned => b_.u_greater_than_equal(bool_t, None, x, y),
                (BinOp::Eq, true) => b_.f_ord_equal(bool_t, None, x, y),
                (BinOp::Ne, true) => b_.f_unord_not_equal(bool_t, None, x, y),
                (BinOp::Lt, true) => b_.f_ord_less_than(bool_t, None, x, y),
                (BinOp::Le, true) => b_.f_ord_less_than_equal(bool_t, None, x, y),
                (BinOp::Gt, true) => b_.f_ord_greater_than(bool_t, None, x, y),
                (_, true) => b_.f_ord_greater_than_equal(bool_t, None, x, y),
                (BinOp::Eq, false) => b_.i_equal(bool_t, None, x, y),
                (BinOp::Ne, false) => b_.i_not_equal(bool_t, None, x, y),
                (BinOp::Lt, false) => b_.s_less_than(bool_t, None, x, y),
                (BinOp::Le, false) => b_.s_less_than_equal(bool_t, None, x, y),
                (BinOp::Gt, false) => b_.s_greater_than(bool_t, None, x, y),
                (_, false) => b_.s_greater_than_equal(bool_t, None, x, y),
            };
            return Ok(Val {
                id: self.ok(r)?,
                dtype: DType::Bool,
            });
        }
        if d == DType::Bool {
            let r = match op {
                BinOp::And | BinOp::Min => self.b.logical_and(bool_t, None, a.id, b.id),
                BinOp::Or | BinOp::Max => self.b.logical_or(bool_t, None, a.id, b.id),
                _ => return Err(self.err(format!("{op:?} on bool"))),
            };
            return Ok(Val {
                id: self.ok(r)?,
                dtype: d,
            });
        }
        let t = self.ty(d)?;
        let (x, y) = (a.id, b.id);
        if d.is_float() {
            let id = match op {
                BinOp::Add => {
                    let r = self.b.f_add(t, None, x, y);
                    let r = self.ok(r)?;
                    self.exact(r)
                }
                BinOp::Sub => {
                    let r = self.b.f_sub(t, None, x, y);
                    let r = self.ok(r)?;
                    self.exact(r)
                }
                BinOp::Mul => {
                    let r = self.b.f_mul(t, None, x, y);
                    let r = self.ok(r)?;
                    self.exact(r)
                }
                BinOp::Div => {
                    let r = self.b.f_div(t, None, x, y);
                    let r = self.ok(r)?;
                    self.exact(r)
                }
                BinOp::Min | BinOp::Max => self.ieee_min_max(d, op == BinOp::Max, x, y)?,
                _ => return Err(self.err(format!("{op:?} on {d}"))),
            };
            return self.narrow(Val { id, dtype: d });
        }
        let id = match op {
            BinOp::Add => {
                let r = self.b.i_add(t, None, x, y);
                self.ok(r)?
            }
            BinOp::Sub => {
                let r = self.b.i_sub(t, None, x, y);
                self.ok(r)?
            }
            BinOp::Mul => {
                let r = self.b.i_mul(t, None, x, y);
                self.ok(r)?
            }
            BinOp::Min | BinOp::Max => {
                let lt = if d == DType::U64 {
                    self.b.u_less_than(bool_t, None, x, y)
                } else {
                    self.b.s_less_than(bool_t, None, x, y)
                };
                let lt = self.ok(lt)?;
                let (p, q) = if op == BinOp::Min { (x, y) } else { (y, x) };
                let r = self.b.select(t, None, lt, p, q);
                self.ok(r)?
            }
            BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod => self.division(op, d, x, y, &b)?,
            _ => return Err(self.err(format!("{op:?} on {d}"))),
        };
        self.narrow(Val { id, dtype: d })
    }

    /// `bool` as int32 0/1.
    fn bool_to_int(&mut self, v: Val) -> Result<Word> {
        let t = self.ty(DType::I32)?;
        let (one, zero) = (self.const_i32(1), self.const_i32(0));
        let r = self.b.select(t, None, v.id, one, zero);
        self.ok(r)
    }

    /// Integer `/`, `floordiv` or `floormod` of `x` by `y` (see [`crate::codegen`]: a
    /// divisor of 0 or -1 is replaced by 1 before dividing, and `-1` handled apart).
    fn division(&mut self, op: BinOp, d: DType, x: Word, y: Word, yv: &Val) -> Result<Word> {
        let _ = yv;
        if d == DType::U64 {
            return self.unsigned_division(op, x, y);
        }
        let t = self.ty(d)?;
        let bool_t = self.ty(DType::Bool)?;
        let zero = self.const_int(0, d)?;
        let one = self.const_int(1, d)?;
        let minus_one = self.const_int(-1, d)?;
        let known = self.constant_value(y);
        let needs_guard = !matches!(known, Some(c) if c != 0 && c != -1);
        let safe = if needs_guard {
            let z = self.b.i_equal(bool_t, None, y, zero);
            let z = self.ok(z)?;
            if let Some(status) = self.status {
                self.report_if(z, status)?;
            }
            let m = self.b.i_equal(bool_t, None, y, minus_one);
            let m = self.ok(m)?;
            let bad = self.b.logical_or(bool_t, None, z, m);
            let bad = self.ok(bad)?;
            let r = self.b.select(t, None, bad, one, y);
            self.ok(r)?
        } else {
            y
        };
        let (q, rem) = self.truncating_division(t, d, x, safe)?;
        let result = match op {
            BinOp::Div => q,
            _ => {
                // Truncating quotient and remainder, corrected by one when the remainder
                // is nonzero and its sign differs from the divisor's.
                let nz = self.b.i_not_equal(bool_t, None, rem, zero);
                let nz = self.ok(nz)?;
                let sx = self.b.bitwise_xor(t, None, rem, safe);
                let sx = self.ok(sx)?;
                let neg = self.b.s_less_than(bool_t, None, sx, zero);
                let neg = self.ok(neg)?;
                let fix = self.b.logical_and(bool_t, None, nz, neg);
                let fix = self.ok(fix)?;
                if op == BinOp::FloorDiv {
                    let q1 = self.b.i_sub(t, None, q, one);
                    let q1 = self.ok(q1)?;
                    let r = self.b.select(t, None, fix, q1, q);
                    self.ok(r)?
                } else {
                    let r1 = self.b.i_add(t, None, rem, safe);
                    let r1 = self.ok(r1)?;
                    let r = self.b.select(t, None, fix, r1, rem);
                    self.ok(r)?
                }
            }
        };
        if !needs_guard {
            return Ok(result);
        }
        // By -1: the quotient is the wrapping negation, the remainder 0.
        let m = self.b.i_equal(bool_t, None, y, minus_one);
        let m = self.ok(m)?;
        let special = match op {
            BinOp::FloorMod => zero,
            _ => {
                let r = self.b.i_sub(t, None, zero, x);
                self.ok(r)?
            }
        };
        let r = self.b.select(t, None, m, special, result);
        self.ok(r)
    }

    /// uint64 `/` (= `floordiv`) or `floormod` of `x` by `y`: `OpUDiv`/`OpUMod` on the
    /// bit patterns, a zero divisor replaced by 1 (and reported, as in [`Gen::division`]).
    fn unsigned_division(&mut self, op: BinOp, x: Word, y: Word) -> Result<Word> {
        let d = DType::U64;
        let t = self.ty(d)?;
        let bool_t = self.ty(DType::Bool)?;
        let safe = if matches!(self.constant_value(y), Some(c) if c != 0) {
            y
        } else {
            let zero = self.const_int(0, d)?;
            let one = self.const_int(1, d)?;
            let z = self.b.i_equal(bool_t, None, y, zero);
            let z = self.ok(z)?;
            if let Some(status) = self.status {
                self.report_if(z, status)?;
            }
            let r = self.b.select(t, None, z, one, y);
            self.ok(r)?
        };
        let u = self.b.type_int(64, 0);
        let ux = self.b.bitcast(u, None, x);
        let ux = self.ok(ux)?;
        let uy = self.b.bitcast(u, None, safe);
        let uy = self.ok(uy)?;
        let r = if op == BinOp::FloorMod {
            self.b.u_mod(u, None, ux, uy)
        } else {
            self.b.u_div(u, None, ux, uy)
        };
        let r = self.ok(r)?;
        let r = self.b.bitcast(t, None, r);
        self.ok(r)
    }

    /// The truncating quotient and remainder of `x` by `y` (not 0 or -1), computed on
    /// magnitudes with `OpUDiv`/`OpUMod` and signed after: Vulkan leaves `OpSRem` and
    /// `OpSMod` undefined for negative operands, and NVIDIA's driver gives the remainder
    /// of the magnitudes there (a wrap-mode `take` read the wrong element on an H200).
    /// A magnitude of `MIN` is `MIN`'s bits, which read unsigned are `2^(w-1)`, exact.
    fn truncating_division(&mut self, t: Word, d: DType, x: Word, y: Word) -> Result<(Word, Word)> {
        let bool_t = self.ty(DType::Bool)?;
        let zero = self.const_int(0, d)?;
        let magnitude = |g: &mut Self, v: Word| -> Result<(Word, Word)> {
            let neg = g.b.s_less_than(bool_t, None, v, zero);
            let neg = g.ok(neg)?;
            let minus = g.b.s_negate(t, None, v);
            let minus = g.ok(minus)?;
            let abs = g.b.select(t, None, neg, minus, v);
            Ok((g.ok(abs)?, neg))
        };
        let (ax, x_neg) = magnitude(self, x)?;
        let (ay, y_neg) = magnitude(self, y)?;
        // OpUDiv/OpUMod take unsigned types: the magnitudes' bits, reinterpreted.
        let u = self.b.type_int(held_bits(d), 0);
        let unsigned = |g: &mut Self, v: Word, to: Word| -> Result<Word> {
            let c = g.b.bitcast(to, None, v);
            g.ok(c)
        };
        let (ux, uy) = (unsigned(self, ax, u)?, unsigned(self, ay, u)?);
        let uq = self.b.u_div(u, None, ux, uy);
        let uq = self.ok(uq)?;
        let ur = self.b.u_mod(u, None, ux, uy);
        let ur = self.ok(ur)?;
        let (uq, ur) = (unsigned(self, uq, t)?, unsigned(self, ur, t)?);
        let signs_differ = self.b.logical_not_equal(bool_t, None, x_neg, y_neg);
        let signs_differ = self.ok(signs_differ)?;
        let minus_q = self.b.s_negate(t, None, uq);
        let minus_q = self.ok(minus_q)?;
        let q = self.b.select(t, None, signs_differ, minus_q, uq);
        let q = self.ok(q)?;
        // The truncating remainder takes the dividend's sign.
        let minus_r = self.b.s_negate(t, None, ur);
        let minus_r = self.ok(minus_r)?;
        let rem = self.b.select(t, None, x_neg, minus_r, ur);
        Ok((q, self.ok(rem)?))
    }

    /// Stores 1 to the status word when `cond` holds.
    fn report_if(&mut self, cond: Word, status: Word) -> Result<()> {
        let (merge, l_set) = (self.b.id(), self.b.id());
        let r = self.b.selection_merge(merge, SelectionControl::NONE);
        self.ok(r)?;
        let r = self.b.branch_conditional(cond, l_set, merge, []);
        self.ok(r)?;
        self.start_block(l_set)?;
        let u = self.b.type_int(32, 0);
        let ptr = self.b.type_pointer(None, StorageClass::StorageBuffer, u);
        let zero = self.const_i32(0);
        let p = self.b.access_chain(ptr, None, status, [zero, zero]);
        let p = self.ok(p)?;
        let one = self.const_u32(1);
        let r = self.b.store(p, one, None, []);
        self.ok(r)?;
        self.branch(merge)?;
        self.start_block(merge)
    }

    /// The value of integer constant `id`, if it is one this generator made.
    fn constant_value(&self, id: Word) -> Option<i64> {
        self.int_values.get(&id).copied()
    }

    /// IEEE 754-2019 maximum/minimum: NaN if either is NaN; equal operands (only the
    /// zeros differ) combine their sign bits (max: and, min: or).
    fn ieee_min_max(&mut self, d: DType, max: bool, x: Word, y: Word) -> Result<Word> {
        let f = self.ty(d)?;
        let u = self.float_bits_ty(d)?;
        let bool_t = self.ty(DType::Bool)?;
        let gt = if max {
            self.b.f_ord_greater_than(bool_t, None, x, y)
        } else {
            self.b.f_ord_less_than(bool_t, None, x, y)
        };
        let gt = self.ok(gt)?;
        let r = self.b.select(f, None, gt, x, y);
        let r = self.ok(r)?;
        let eq = self.b.f_ord_equal(bool_t, None, x, y);
        let eq = self.ok(eq)?;
        let bx = self.b.bitcast(u, None, x);
        let bx = self.ok(bx)?;
        let by = self.b.bitcast(u, None, y);
        let by = self.ok(by)?;
        let z = if max {
            self.b.bitwise_and(u, None, bx, by)
        } else {
            self.b.bitwise_or(u, None, bx, by)
        };
        let z = self.ok(z)?;
        let z = self.b.bitcast(f, None, z);
        let z = self.ok(z)?;
        let r = self.b.select(f, None, eq, z, r);
        let r = self.ok(r)?;
        let nx = self.b.is_nan(bool_t, None, x);
        let nx = self.ok(nx)?;
        let ny = self.b.is_nan(bool_t, None, y);
        let ny = self.ok(ny)?;
        let nan = self.b.logical_or(bool_t, None, nx, ny);
        let nan = self.ok(nan)?;
        let qnan = self.const_float(f64::NAN, d)?;
        let r = self.b.select(f, None, nan, qnan, r);
        self.ok(r)
    }

    pub(crate) fn cast(&mut self, v: Val, to: DType) -> Result<Val> {
        let from = v.dtype;
        if from == to {
            return Ok(v);
        }
        let t = self.ty(to)?;
        let bool_t = self.ty(DType::Bool)?;
        let x = v.id;
        let id = match (from, to) {
            (f, DType::Bool) if f.is_float() => {
                let z = self.const_float(0.0, f)?;
                let r = self.b.f_unord_not_equal(bool_t, None, x, z);
                self.ok(r)?
            }
            (f, DType::Bool) => {
                let z = self.const_int(0, f)?;
                let r = self.b.i_not_equal(bool_t, None, x, z);
                self.ok(r)?
            }
            (DType::Bool, to) => {
                let (one, zero) = if to.is_float() {
                    (self.const_float(1.0, to)?, self.const_float(0.0, to)?)
                } else {
                    (self.const_int(1, to)?, self.const_int(0, to)?)
                };
                let r = self.b.select(t, None, x, one, zero);
                self.ok(r)?
            }
            (f, to) if f.is_float() && to.is_float() => return self.float_to_float(x, f, to),
            (f, to) if f.is_float() => return self.float_to_int(x, f, to),
            (f, to) if to.is_float() => return self.int_to_float(x, f, to),
            (f, to) if held_bits(f) == held_bits(to) => {
                return self.narrow(Val { id: x, dtype: to });
            }
            (_, to) if held_bits(to) == 64 => {
                let r = self.sign_extend_to_64(t, x)?;
                return self.narrow(Val { id: r, dtype: to });
            }
            (f, to) if held_bits(f) == 64 => {
                let r = self.b.s_convert(t, None, x);
                let r = self.ok(r)?;
                return self.narrow(Val { id: r, dtype: to });
            }
            _ => return self.narrow(Val { id: x, dtype: to }),
        };
        Ok(Val { id, dtype: to })
    }

    /// Int32 `x` sign-extended to int64 (type `t`): zero-extended (`OpUConvert`), then
    /// shifted up and arithmetically back down by 32. Not `OpSConvert`: lavapipe
    /// compares its result wrongly (`cast(int64, x) < 0` false for a negative int32 x,
    /// which lost the sign bits of ONNX BitwiseAnd/Or on int8 and int16).
    fn sign_extend_to_64(&mut self, t: Word, x: Word) -> Result<Word> {
        let u = self.b.type_int(64, 0);
        let r = self.b.u_convert(u, None, x);
        let r = self.ok(r)?;
        let r = self.b.bitcast(t, None, r);
        let r = self.ok(r)?;
        let c32 = self.const_int(32, DType::I64)?;
        let r = self.b.shift_left_logical(t, None, r, c32);
        let r = self.ok(r)?;
        let r = self.b.shift_right_arithmetic(t, None, r, c32);
        self.ok(r)
    }

    /// Float `x` of dtype `from` to float dtype `to`, rounded once where the
    /// interpreter rounds once (float64 to float16 directly; to bfloat16 through
    /// float32, which rounds twice only for a float64 whose float32 rounding lands on a
    /// bfloat16 tie).
    fn float_to_float(&mut self, x: Word, from: DType, to: DType) -> Result<Val> {
        let t = self.ty(to)?;
        let id = if to == DType::F64 {
            // Widening is exact.
            let r = self.b.f_convert(t, None, x);
            self.ok(r)?
        } else if from == DType::F64 {
            let f = self.ty(DType::F32)?;
            let r = if to == DType::F16 {
                let h = self.f16_ty()?;
                let r = self.b.f_convert(h, None, x);
                let r = self.ok(r)?;
                self.b.f_convert(f, None, r)
            } else {
                self.b.f_convert(f, None, x)
            };
            let r = self.ok(r)?;
            if to == DType::BF16 {
                return self.narrow(Val { id: r, dtype: to });
            }
            r
        } else {
            // Both held as float32: round to the narrower one.
            return self.narrow(Val { id: x, dtype: to });
        };
        Ok(Val { id, dtype: to })
    }

    /// Integer `x` of dtype `from` to float dtype `to` (uint64 converted unsigned;
    /// float16 rounded once, straight from the integer).
    fn int_to_float(&mut self, x: Word, from: DType, to: DType) -> Result<Val> {
        let t = self.ty(to)?;
        let convert = |g: &mut Self, ty: Word| -> Result<Word> {
            let r = if from == DType::U64 {
                g.b.convert_u_to_f(ty, None, x)
            } else {
                g.b.convert_s_to_f(ty, None, x)
            };
            g.ok(r)
        };
        let id = match to {
            DType::F16 => {
                let h = self.f16_ty()?;
                let r = convert(self, h)?;
                let r = self.b.f_convert(t, None, r);
                self.ok(r)?
            }
            DType::BF16 => {
                let r = convert(self, t)?;
                return self.narrow(Val { id: r, dtype: to });
            }
            _ => convert(self, t)?,
        };
        Ok(Val { id, dtype: to })
    }

    /// Float `x` of dtype `from` to integer dtype `to`: truncated toward zero, saturated
    /// to `to`'s range, NaN to 0 (Rust's `as`, `semantics::float_to_int`).
    fn float_to_int(&mut self, x: Word, from: DType, to: DType) -> Result<Val> {
        let f = self.ty(from)?;
        let bool_t = self.ty(DType::Bool)?;
        let double = from == DType::F64;
        let nan = self.b.is_nan(bool_t, None, x);
        let nan = self.ok(nan)?;
        let zero_f = self.const_float(0.0, from)?;
        let xs = self.b.select(f, None, nan, zero_f, x);
        let xs = self.ok(xs)?;
        if to == DType::U64 {
            return self.float_to_u64(xs, from);
        }
        let wide = matches!(to, DType::I64 | DType::U32);
        let via = if wide { DType::I64 } else { DType::I32 };
        let t = self.ty(via)?;
        // The range as floats: -2^(n-1) is exact; the largest float below 2^(n-1) is
        // the top of the exactly converted range, anything at or above 2^(n-1) is MAX.
        let n = if wide { 63 } else { 31 };
        let limit = 2f64.powi(n);
        let hi = largest_below(limit, double);
        let max = if wide { i64::MAX } else { i32::MAX as i64 };
        let (lo_c, hi_c, limit_c) = (
            self.const_float(-limit, from)?,
            self.const_float(hi, from)?,
            self.const_float(limit, from)?,
        );
        let below = self.b.f_ord_less_than(bool_t, None, xs, lo_c);
        let below = self.ok(below)?;
        let xs = self.b.select(f, None, below, lo_c, xs);
        let xs = self.ok(xs)?;
        let above = self.b.f_ord_greater_than(bool_t, None, xs, hi_c);
        let above = self.ok(above)?;
        let xc = self.b.select(f, None, above, hi_c, xs);
        let xc = self.ok(xc)?;
        let i = self.b.convert_f_to_s(t, None, xc);
        let i = self.ok(i)?;
        let big = self.b.f_ord_greater_than_equal(bool_t, None, xs, limit_c);
        let big = self.ok(big)?;
        let max_c = self.const_int(max, via)?;
        let i = self.b.select(t, None, big, max_c, i);
        let mut id = self.ok(i)?;
        if let Some((lo, hi)) = match to {
            DType::I8 => Some((-128, 127)),
            DType::U8 => Some((0, 255)),
            DType::I16 => Some((-32768, 32767)),
            DType::U16 => Some((0, 65535)),
            DType::U32 => Some((0, u32::MAX as i64)),
            _ => None,
        } {
            let (lo, hi) = (self.const_int(lo, via)?, self.const_int(hi, via)?);
            let l = self.b.s_less_than(bool_t, None, id, lo);
            let l = self.ok(l)?;
            let r = self.b.select(t, None, l, lo, id);
            id = self.ok(r)?;
            let h = self.b.s_greater_than(bool_t, None, id, hi);
            let h = self.ok(h)?;
            let r = self.b.select(t, None, h, hi, id);
            id = self.ok(r)?;
        }
        Ok(Val { id, dtype: to })
    }

    /// Float `xs` (not NaN) of dtype `from` to uint64: below zero 0, at or above 2^64
    /// `u64::MAX`, truncated between (`OpConvertFToU`), held as the bit pattern.
    fn float_to_u64(&mut self, xs: Word, from: DType) -> Result<Val> {
        let f = self.ty(from)?;
        let t = self.ty(DType::U64)?;
        let bool_t = self.ty(DType::Bool)?;
        let limit = 2f64.powi(64);
        let zero = self.const_float(0.0, from)?;
        let hi = self.const_float(largest_below(limit, from == DType::F64), from)?;
        let limit_c = self.const_float(limit, from)?;
        let below = self.b.f_ord_less_than(bool_t, None, xs, zero);
        let below = self.ok(below)?;
        let xc = self.b.select(f, None, below, zero, xs);
        let xc = self.ok(xc)?;
        let above = self.b.f_ord_greater_than(bool_t, None, xc, hi);
        let above = self.ok(above)?;
        let xc = self.b.select(f, None, above, hi, xc);
        let xc = self.ok(xc)?;
        let u = self.b.type_int(64, 0);
        let i = self.b.convert_f_to_u(u, None, xc);
        let i = self.ok(i)?;
        let i = self.b.bitcast(t, None, i);
        let i = self.ok(i)?;
        let big = self.b.f_ord_greater_than_equal(bool_t, None, xs, limit_c);
        let big = self.ok(big)?;
        let max_c = self.const_int(-1, DType::U64)?;
        let r = self.b.select(t, None, big, max_c, i);
        Ok(Val {
            id: self.ok(r)?,
            dtype: DType::U64,
        })
    }
}

/// The largest float64 (`double`) or float32 value below the power of two `limit`
/// (exact in either).
fn largest_below(limit: f64, double: bool) -> f64 {
    let mantissa = if double { 53 } else { 24 };
    limit - limit / 2f64.powi(mantissa)
}

/// Whether `e` reads a buffer anywhere.
fn has_load(e: &Expr) -> bool {
    match e {
        Expr::Load { .. } => true,
        Expr::Binary { lhs, rhs, .. } => has_load(lhs) || has_load(rhs),
        Expr::Not(x) | Expr::Cast { value: x, .. } => has_load(x),
        Expr::Select { cond, then, else_ } => has_load(cond) || has_load(then) || has_load(else_),
        Expr::Call { args, .. } => args.iter().any(has_load),
        Expr::Ramp { base, stride, .. } => has_load(base) || has_load(stride),
        Expr::Broadcast { value, .. } => has_load(value),
        Expr::Int { .. } | Expr::Float { .. } | Expr::Bool(_) | Expr::Var(_) => false,
    }
}

/// The width of the integer type holding `d` (see [`crate::codegen`]): 64 for int64,
/// uint64 and uint32 (held zero-extended), 32 for the other integers.
fn held_bits(d: DType) -> u32 {
    if matches!(d, DType::I64 | DType::U64 | DType::U32) {
        64
    } else {
        32
    }
}
