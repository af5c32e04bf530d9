//! Loop IR → SPIR-V: one launch of a [`PrimFunc`] (see [`crate::launch`]) becomes one
//! `GLCompute` module (SPIR-V 1.5, Vulkan 1.2 environment, logical addressing) with entry
//! point `main`.
//!
//! - **Interface**: buffer parameter `k` is a storage buffer (`struct { T data[]; }`,
//!   `Block`) at descriptor set 0, binding `k`; int8/uint8/bool elements are 8-bit
//!   (`StorageBuffer8BitAccess`), float16 elements 16-bit (`StorageBuffer16BitAccess`).
//!   Kernels have no scalar parameters, so there are no push constants. `blockIdx` and
//!   `threadIdx` loops read `WorkgroupId` and `LocalInvocationId`; the workgroup size
//!   (`LocalSize`) is the launch's. In a folded launch ([`Launch::folded`]) `blockIdx`
//!   comes from the group's linear number, and the whole body sits under
//!   `if linear < block count` (uniform per workgroup, so barriers stay convergent). Shared allocations are `Workgroup` arrays, local ones
//!   `Function` arrays, both of the value types below.
//! - **Values** are SSA ids of five types: `bool`, `int` (int32, and int8/uint8/int16/
//!   uint16 held sign/zero-extended and re-wrapped after every operation; their buffers
//!   8- or 16-bit), `long` (int64; uint64 as its bit pattern, compared, divided and
//!   converted unsigned; uint32 held zero-extended and re-wrapped; all need `Int64`),
//!   `float` (float32; float16 and bfloat16 held as float32 and rounded to their width
//!   after every operation, as the loop-IR interpreter does; bfloat16 buffers hold the
//!   16-bit patterns, rounded to nearest even in integer arithmetic, NaN kept quiet) and
//!   `double` (float64, `Float64`). Loop counters are `OpPhi`s.
//! - **Control flow** is structured: serial loops are `OpLoopMerge` headers with a
//!   continue block, `if` and lazy `select` (only the chosen side runs, as in the
//!   interpreter) are `OpSelectionMerge` diamonds, a thread loop shorter than its launch
//!   dimension is a guarding diamond, and `barrier` is `OpControlBarrier` (workgroup
//!   scope, acquire-release on workgroup memory).
//! - **Semantics** follow `kiln_te::tir::semantics` exactly ([`expr`]): `+ - * /` on
//!   floats carry `NoContraction` (never fused), comparisons are ordered except `!=`,
//!   IEEE 754-2019 `max`/`min`, wrapping integers, floor division and modulo, division
//!   never traps (a zero or `-1` divisor is made safe, `x / -1` is `-x`), saturating
//!   float→int casts. The intrinsics are in [`math`].
//! - **Division by zero** is an error, as on every target: a kernel that divides
//!   integers by a value that is not a positive constant ([`PrimFunc::may_divide_by_zero`])
//!   has one more storage buffer, binding `params.len()`, a status word; a zero divisor
//!   stores 1 there (and divides by one), and the library reports the error after the
//!   kernel ran.

mod expr;
mod math;
mod math64;

pub(crate) use math::CIRCULAR;
mod stmt;

use std::collections::HashMap;

use kiln_executor::{Error, Result};
use kiln_ir::DType;
use kiln_te::tir::{BufferId, PrimFunc, Scope, Stmt, ThreadAxis};
use rspirv::binary::Assemble;
use rspirv::dr::{self, Builder, Operand};
use rspirv::spirv::{
    self, AddressingModel, BuiltIn, Capability, Decoration, ExecutionMode, ExecutionModel,
    FunctionControl, MemoryModel, SelectionControl, StorageClass, Word,
};

use crate::features::Features;
use crate::launch::{Launch, axis_index};

/// A value: its SSA id and the loop-IR dtype it holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Val {
    pub id: Word,
    pub dtype: DType,
}

/// Which optional capabilities the module uses.
#[derive(Clone, Copy, Debug, Default)]
struct Uses {
    int8: bool,
    int16: bool,
    float16: bool,
    int64: bool,
    float64: bool,
}

/// A buffer's variable: its id, storage class and element (value or storage) type.
#[derive(Clone, Copy, Debug)]
struct BufVar {
    var: Word,
    class: StorageClass,
    elem: Word,
}

/// The graph ops whose float64 lowering calls an intrinsic the codegen has no float64
/// sequence for (`pow`, `erf`: GLSL.std.450 has `Pow` for 16- and 32-bit floats only,
/// `erf` not at all); [`crate::VulkanBackend`] declares them unsupported.
pub(crate) const F64_MISSING_OPS: [&str; 2] = ["erf", "power"];

/// The SPIR-V words of the launch of `func` rooted at `root`.
pub(crate) fn emit_launch(
    func: &PrimFunc,
    root: &Stmt,
    launch: &Launch,
    features: &Features,
) -> Result<Vec<u32>> {
    let mut b = Builder::new();
    b.set_version(1, 5);
    let glsl = b.ext_inst_import("GLSL.std.450");
    let mut g = Gen {
        func,
        launch,
        features,
        b,
        glsl,
        block: 0,
        vars: vec![None; func.vars.len()],
        buffers: HashMap::new(),
        storage_types: HashMap::new(),
        consts: HashMap::new(),
        int_values: HashMap::new(),
        bools: [None; 2],
        builtins: HashMap::new(),
        interface: vec![],
        uses: Uses::default(),
        bound: [false; 6],
        guarded_depth: 0,
        shared_bytes: 0,
        status: None,
        linear: None,
    };
    for (k, &p) in func.params.iter().enumerate() {
        g.storage_buffer(k as u32, p)?;
    }
    if func.may_divide_by_zero() {
        g.status = Some(g.status_buffer(func.params.len() as u32));
    }
    let void = g.b.type_void();
    let fn_ty = g.b.type_function(void, []);
    let main =
        g.b.begin_function(void, None, FunctionControl::NONE, fn_ty)
            .map_err(internal)?;
    g.block = g.b.begin_block(None).map_err(internal)?;
    let past_grid = g.guard_folded_grid()?;
    g.stmt(root)?;
    if let Some(merge) = past_grid {
        g.branch(merge)?;
        g.start_block(merge)?;
    }
    g.b.ret().map_err(internal)?;
    g.b.end_function().map_err(internal)?;
    if g.shared_bytes > features.max_shared_bytes as u64 {
        return Err(g.err(format!(
            "{} bytes of shared memory, the device allows {}",
            g.shared_bytes, features.max_shared_bytes
        )));
    }
    g.finish(main)
}

fn internal(e: dr::Error) -> Error {
    Error::Internal(format!("SPIR-V builder: {e}"))
}

pub(crate) struct Gen<'a> {
    func: &'a PrimFunc,
    launch: &'a Launch,
    features: &'a Features,
    pub(crate) b: Builder,
    glsl: Word,
    /// The label of the block being filled.
    block: Word,
    vars: Vec<Option<Val>>,
    buffers: HashMap<BufferId, BufVar>,
    /// Per storage element type: the `Block` struct's pointer type.
    storage_types: HashMap<Word, Word>,
    consts: HashMap<(Word, u64), Word>,
    /// The value of each integer constant made by [`Gen::const_int`].
    int_values: HashMap<Word, i64>,
    bools: [Option<Word>; 2],
    builtins: HashMap<BuiltIn, Word>,
    interface: Vec<Word>,
    uses: Uses,
    /// Which launch axes an enclosing thread loop binds (`ThreadAxis::ALL` order).
    bound: [bool; 6],
    /// How many enclosing thread-loop guards (a barrier under one is divergent).
    guarded_depth: usize,
    shared_bytes: u64,
    /// The status word's buffer, in kernels that report division by zero.
    pub(crate) status: Option<Word>,
    /// In a folded launch: the workgroup's linear number (uint32).
    linear: Option<Word>,
}

impl<'a> Gen<'a> {
    pub(crate) fn err(&self, what: impl std::fmt::Display) -> Error {
        Error::Unsupported(format!(
            "SPIR-V codegen, kernel @{}: {what}",
            self.func.name
        ))
    }

    /// Maps a builder error (a codegen bug) to [`Error::Internal`].
    pub(crate) fn ok<T>(&self, r: std::result::Result<T, dr::Error>) -> Result<T> {
        r.map_err(internal)
    }

    fn need(&self, have: bool, what: &str, dtype: DType) -> Result<()> {
        self.features
            .require(have, what)
            .map_err(|why| self.err(format!("{dtype} {why}")))
    }

    /// The type holding values of `d` (see the module doc).
    pub(crate) fn ty(&mut self, d: DType) -> Result<Word> {
        Ok(match d {
            DType::Bool => self.b.type_bool(),
            DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::I32 => self.b.type_int(32, 1),
            // uint32 is held zero-extended in int64, uint64 as its bit pattern.
            DType::I64 | DType::U64 | DType::U32 => {
                self.need(self.features.int64, "Int64 (shaderInt64)", d)?;
                self.uses.int64 = true;
                self.b.type_int(64, 1)
            }
            DType::F32 | DType::F16 | DType::BF16 => self.b.type_float(32, None),
            DType::F64 => {
                self.need(self.features.float64, "Float64 (shaderFloat64)", d)?;
                self.uses.float64 = true;
                self.b.type_float(64, None)
            }
        })
    }

    /// The float16 type (conversions only).
    pub(crate) fn f16_ty(&mut self) -> Result<Word> {
        self.need(
            self.features.float16 && self.features.rte16,
            "Float16 with StorageBuffer16BitAccess and RoundingModeRTE (shaderFloat16, \
             storageBuffer16BitAccess, shaderRoundingModeRTEFloat16)",
            DType::F16,
        )?;
        self.uses.float16 = true;
        Ok(self.b.type_float(16, None))
    }

    /// The 16-bit integer type of int16/uint16 storage (conversions only).
    pub(crate) fn int16_ty(&mut self, d: DType) -> Result<Word> {
        self.need(
            self.features.int16,
            "StorageBuffer16BitAccess with Int16 (storageBuffer16BitAccess, shaderInt16)",
            d,
        )?;
        self.uses.int16 = true;
        Ok(self.b.type_int(16, 0))
    }

    /// The element type of a `d` storage buffer.
    fn storage_ty(&mut self, d: DType) -> Result<Word> {
        Ok(match d {
            DType::F16 => self.f16_ty()?,
            DType::I8 | DType::U8 | DType::Bool => {
                self.need(
                    self.features.int8,
                    "StorageBuffer8BitAccess with Int8 (storageBuffer8BitAccess, shaderInt8)",
                    d,
                )?;
                self.uses.int8 = true;
                self.b.type_int(8, 0)
            }
            DType::I16 | DType::U16 | DType::BF16 => self.int16_ty(d)?,
            DType::U32 => {
                self.ty(d)?;
                self.b.type_int(32, 0)
            }
            _ => self.ty(d)?,
        })
    }

    /// Declares buffer parameter `p` as storage buffer binding `binding`.
    fn storage_buffer(&mut self, binding: u32, p: BufferId) -> Result<()> {
        let buf = self
            .func
            .buffer(p)
            .ok_or_else(|| self.err(format!("parameter {p} is no buffer")))?
            .clone();
        let bytes = buf
            .numel()
            .and_then(|n| n.checked_mul(buf.dtype.size_bytes()))
            .filter(|&n| n as u64 <= self.features.max_buffer_bytes && n <= i32::MAX as usize)
            .ok_or_else(|| {
                self.err(format!(
                    "buffer {} exceeds the device's maxStorageBufferRange ({} bytes)",
                    buf.name, self.features.max_buffer_bytes
                ))
            })?;
        let _ = bytes;
        let elem = self.storage_ty(buf.dtype)?;
        let ptr_struct = self.storage_block(elem, buf.dtype.size_bytes() as u32);
        let var = self
            .b
            .variable(ptr_struct, None, StorageClass::StorageBuffer, None);
        self.b
            .decorate(var, Decoration::DescriptorSet, [Operand::LiteralBit32(0)]);
        self.b
            .decorate(var, Decoration::Binding, [Operand::LiteralBit32(binding)]);
        self.interface.push(var);
        self.buffers.insert(
            p,
            BufVar {
                var,
                class: StorageClass::StorageBuffer,
                elem,
            },
        );
        Ok(())
    }

    /// The pointer type of a storage buffer of `elem` elements `stride` bytes apart
    /// (`struct { elem data[]; }`, `Block`), made once per element type: the types are
    /// unique in a module, so a uint32 buffer and the status word share it.
    fn storage_block(&mut self, elem: Word, stride: u32) -> Word {
        if let Some(&ps) = self.storage_types.get(&elem) {
            return ps;
        }
        let rt = self.b.type_runtime_array(elem);
        self.b
            .decorate(rt, Decoration::ArrayStride, [Operand::LiteralBit32(stride)]);
        let st = self.b.type_struct([rt]);
        self.b.decorate(st, Decoration::Block, []);
        self.b
            .member_decorate(st, 0, Decoration::Offset, [Operand::LiteralBit32(0)]);
        let ps = self.b.type_pointer(None, StorageClass::StorageBuffer, st);
        self.storage_types.insert(elem, ps);
        ps
    }

    /// The status word: a `uint` storage buffer at `binding`.
    fn status_buffer(&mut self, binding: u32) -> Word {
        let u = self.b.type_int(32, 0);
        let ps = self.storage_block(u, 4);
        let var = self.global_variable(ps, StorageClass::StorageBuffer);
        self.b
            .decorate(var, Decoration::DescriptorSet, [Operand::LiteralBit32(0)]);
        self.b
            .decorate(var, Decoration::Binding, [Operand::LiteralBit32(binding)]);
        self.interface.push(var);
        var
    }

    /// Declares shared or local buffer `id` (once per module).
    fn scratch_buffer(&mut self, id: BufferId) -> Result<()> {
        if self.buffers.contains_key(&id) {
            return Ok(());
        }
        let buf = self
            .func
            .buffer(id)
            .ok_or_else(|| self.err(format!("allocate of unknown {id}")))?
            .clone();
        let class = match buf.scope {
            Scope::Shared => StorageClass::Workgroup,
            Scope::Local => StorageClass::Function,
            Scope::Global => {
                return Err(self.err(format!("allocation of global buffer {}", buf.name)));
            }
        };
        let n = buf
            .numel()
            .filter(|&n| n <= i32::MAX as usize)
            .ok_or_else(|| self.err(format!("buffer {} is too large", buf.name)))?;
        let elem = self.ty(buf.dtype)?;
        let len = self.const_i32(n.max(1) as i32);
        let arr = self.b.type_array(elem, len);
        let ptr = self.b.type_pointer(None, class, arr);
        let var = if class == StorageClass::Workgroup {
            let width = match buf.dtype {
                DType::I64 | DType::U64 | DType::U32 | DType::F64 => 8,
                _ => 4,
            };
            self.shared_bytes += n as u64 * width;
            let v = self.global_variable(ptr, class);
            self.interface.push(v);
            v
        } else {
            // Function variables sit at the top of the entry block.
            let v = self.b.id();
            let inst = dr::Instruction::new(
                spirv::Op::Variable,
                Some(ptr),
                Some(v),
                vec![Operand::StorageClass(class)],
            );
            let f = self
                .b
                .module_mut()
                .functions
                .last_mut()
                .ok_or_else(|| Error::Internal("SPIR-V codegen: no function".into()))?;
            f.blocks
                .first_mut()
                .ok_or_else(|| Error::Internal("SPIR-V codegen: no entry block".into()))?
                .instructions
                .insert(0, inst);
            v
        };
        self.buffers.insert(id, BufVar { var, class, elem });
        Ok(())
    }

    /// A module-level variable (rspirv's `variable` would put it in the open block).
    fn global_variable(&mut self, ptr: Word, class: StorageClass) -> Word {
        let v = self.b.id();
        self.b
            .module_mut()
            .types_global_values
            .push(dr::Instruction::new(
                spirv::Op::Variable,
                Some(ptr),
                Some(v),
                vec![Operand::StorageClass(class)],
            ));
        v
    }

    /// An integer or float constant of type `ty` with bit pattern `bits` (64-bit types
    /// take all 64 bits).
    fn constant(&mut self, ty: Word, bits: u64, wide: bool) -> Word {
        if let Some(&c) = self.consts.get(&(ty, bits)) {
            return c;
        }
        let c = if wide {
            self.b.constant_bit64(ty, bits)
        } else {
            self.b.constant_bit32(ty, bits as u32)
        };
        self.consts.insert((ty, bits), c);
        c
    }

    pub(crate) fn const_i32(&mut self, v: i32) -> Word {
        let t = self.b.type_int(32, 1);
        self.constant(t, v as u32 as u64, false)
    }

    /// A 64-bit constant of (unsigned 64-bit integer) type `ty`.
    pub(crate) fn constant_u64(&mut self, v: u64, ty: Word) -> Word {
        self.constant(ty, v, true)
    }

    pub(crate) fn const_u32(&mut self, v: u32) -> Word {
        let t = self.b.type_int(32, 0);
        self.constant(t, v as u64, false)
    }

    pub(crate) fn const_f32(&mut self, v: f32) -> Word {
        let t = self.b.type_float(32, None);
        self.constant(t, v.to_bits() as u64, false)
    }

    /// A constant of float dtype `d` (held as its value type) with value `v` rounded
    /// to float32, or kept for float64.
    pub(crate) fn const_float(&mut self, v: f64, d: DType) -> Result<Word> {
        if d == DType::F64 {
            let t = self.ty(d)?;
            Ok(self.constant(t, v.to_bits(), true))
        } else {
            Ok(self.const_f32(v as f32))
        }
    }

    /// The unsigned integer type as wide as float dtype `d`'s value type (for its bits;
    /// float64's need `Int64`).
    pub(crate) fn float_bits_ty(&mut self, d: DType) -> Result<Word> {
        if d == DType::F64 {
            self.ty(DType::I64)?;
            Ok(self.b.type_int(64, 0))
        } else {
            Ok(self.b.type_int(32, 0))
        }
    }

    /// A constant of integer dtype `d` (held as its value type) with value `v`.
    pub(crate) fn const_int(&mut self, v: i64, d: DType) -> Result<Word> {
        let t = self.ty(d)?;
        let id = if matches!(d, DType::I64 | DType::U64 | DType::U32) {
            self.constant(t, v as u64, true)
        } else {
            self.constant(t, v as i32 as u32 as u64, false)
        };
        self.int_values.insert(id, v);
        Ok(id)
    }

    pub(crate) fn const_bool(&mut self, v: bool) -> Word {
        if let Some(c) = self.bools[v as usize] {
            return c;
        }
        let t = self.b.type_bool();
        let c = if v {
            self.b.constant_true(t)
        } else {
            self.b.constant_false(t)
        };
        self.bools[v as usize] = Some(c);
        c
    }

    /// Ends the current block with a branch to `target`.
    pub(crate) fn branch(&mut self, target: Word) -> Result<()> {
        let r = self.b.branch(target);
        self.ok(r)
    }

    /// Starts filling the block labelled `label`.
    pub(crate) fn start_block(&mut self, label: Word) -> Result<()> {
        let r = self.b.begin_block(Some(label));
        self.block = self.ok(r)?;
        Ok(())
    }

    /// In a folded launch, computes the workgroup's linear number and opens
    /// `if linear < block count`; returns the merge label the caller branches to after
    /// the body (`None`: the launch is not folded).
    fn guard_folded_grid(&mut self) -> Result<Option<Word>> {
        if !self.launch.folded() {
            return Ok(None);
        }
        let u32t = self.b.type_int(32, 0);
        let [gx, gy, _] = self.launch.groups;
        let id = |g: &mut Self, k: u32| g.builtin_component(BuiltIn::WorkgroupId, k);
        let (x, y, z) = (id(self, 0)?, id(self, 1)?, id(self, 2)?);
        // x + gx * (y + gy * z): below 2^31 (launch_of refuses bigger grids).
        let gy_c = self.b.constant_bit32(u32t, gy);
        let gx_c = self.b.constant_bit32(u32t, gx);
        let r = self.b.i_mul(u32t, None, gy_c, z);
        let yz = self.ok(r)?;
        let r = self.b.i_add(u32t, None, y, yz);
        let yz = self.ok(r)?;
        let r = self.b.i_mul(u32t, None, gx_c, yz);
        let yz = self.ok(r)?;
        let r = self.b.i_add(u32t, None, x, yz);
        let linear = self.ok(r)?;
        self.linear = Some(linear);
        let total = self
            .b
            .constant_bit32(u32t, self.launch.block_count() as u32);
        let bool_t = self.ty(DType::Bool)?;
        let r = self.b.u_less_than(bool_t, None, linear, total);
        let inside = self.ok(r)?;
        let (body, merge) = (self.b.id(), self.b.id());
        let r = self.b.selection_merge(merge, SelectionControl::NONE);
        self.ok(r)?;
        let r = self.b.branch_conditional(inside, body, merge, []);
        self.ok(r)?;
        self.start_block(body)?;
        Ok(Some(merge))
    }

    /// Component `k` of the `uvec3` built-in `builtin` (declared on first use).
    fn builtin_component(&mut self, builtin: BuiltIn, k: u32) -> Result<Word> {
        let u32t = self.b.type_int(32, 0);
        let uvec3 = self.b.type_vector(u32t, 3);
        let var = match self.builtins.get(&builtin) {
            Some(&v) => v,
            None => {
                let ptr = self.b.type_pointer(None, StorageClass::Input, uvec3);
                let v = self.global_variable(ptr, StorageClass::Input);
                self.b
                    .decorate(v, Decoration::BuiltIn, [Operand::BuiltIn(builtin)]);
                self.interface.push(v);
                self.builtins.insert(builtin, v);
                v
            }
        };
        let vec = self.b.load(uvec3, None, var, None, []);
        let vec = self.ok(vec)?;
        let c = self.b.composite_extract(u32t, None, vec, [k]);
        self.ok(c)
    }

    /// In a folded launch, `blockIdx` of the block axis `k` (0..3) from the linear
    /// number: `linear / (blocks below k) % blocks[k]` (uint32).
    fn folded_block_id(&mut self, linear: Word, k: usize) -> Result<Word> {
        let u32t = self.b.type_int(32, 0);
        let blocks = self.launch.blocks;
        let below: u32 = blocks[..k].iter().product();
        let mut v = linear;
        if below > 1 {
            let c = self.b.constant_bit32(u32t, below);
            let r = self.b.u_div(u32t, None, v, c);
            v = self.ok(r)?;
        }
        if k < 2 && blocks[k + 1..].iter().any(|&b| b > 1) {
            let c = self.b.constant_bit32(u32t, blocks[k]);
            let r = self.b.u_mod(u32t, None, v, c);
            v = self.ok(r)?;
        }
        Ok(v)
    }

    /// The index (as an int32 value) of `axis` for this invocation.
    fn axis_id(&mut self, axis: ThreadAxis) -> Result<Word> {
        if let (true, Some(linear)) = (axis.is_block(), self.linear) {
            let c = self.folded_block_id(linear, axis_index(axis) % 3)?;
            let i32t = self.b.type_int(32, 1);
            let r = self.b.bitcast(i32t, None, c);
            return self.ok(r);
        }
        let builtin = if axis.is_block() {
            BuiltIn::WorkgroupId
        } else {
            BuiltIn::LocalInvocationId
        };
        let c = self.builtin_component(builtin, axis_index(axis) as u32 % 3)?;
        let i32t = self.b.type_int(32, 1);
        let r = self.b.bitcast(i32t, None, c);
        self.ok(r)
    }

    /// The module's words, after the function is complete.
    fn finish(mut self, main: Word) -> Result<Vec<u32>> {
        let b = &mut self.b;
        b.capability(Capability::Shader);
        if self.uses.int64 {
            b.capability(Capability::Int64);
        }
        if self.uses.float64 {
            b.capability(Capability::Float64);
        }
        if self.uses.int8 {
            b.capability(Capability::Int8);
            b.capability(Capability::StorageBuffer8BitAccess);
        }
        if self.uses.int16 {
            b.capability(Capability::Int16);
            b.capability(Capability::StorageBuffer16BitAccess);
        }
        if self.uses.float16 {
            b.capability(Capability::Float16);
            b.capability(Capability::StorageBuffer16BitAccess);
            b.capability(Capability::RoundingModeRTE);
            b.execution_mode(main, ExecutionMode::RoundingModeRTE, [16]);
        }
        b.memory_model(AddressingModel::Logical, MemoryModel::GLSL450);
        b.entry_point(ExecutionModel::GLCompute, main, "main", &self.interface);
        b.execution_mode(main, ExecutionMode::LocalSize, self.launch.size);
        Ok(self.b.module().assemble())
    }
}
