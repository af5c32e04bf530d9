//! Tensorize (TVM's primitive): a stage whose computation matches a micro-kernel's
//! declaration is lowered to one `microkernel` call over the stage's region instead of
//! its loop nest.
//!
//! Each [`MicroKernel`] is declared here as a TE compute ([`declaration`]); that
//! declaration is the call's meaning everywhere (the loop-IR `expand`, the verifier, the
//! interpreters). [`Schedule::tensorize`] checks the stage's body against the declaration
//! ([`match_gemm`], [`match_conv2d`]) and marks it; [`lower`](mod@super::lower) then emits
//! the call ([`call_shape`]) with the sizes of the stage's region at its compute_at point.

use std::cell::RefCell;
use std::collections::HashMap;

use kiln_ir::DType;

use super::expr::{Expr, IterVar, ReduceKind};
use super::graph::{Graph, OpId, Tensor};
use super::schedule::{Attach, Schedule};
use crate::error::{Error, Result};
use crate::tir::BinOp;
use crate::tir::PrimFunc;
use crate::tir::microkernel::MicroKernel;

/// The kinds of micro-kernel a stage can be tensorized into (sizes come at lowering).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Intrin {
    /// [`MicroKernel::Gemm`].
    Gemm,
    /// [`MicroKernel::Conv2d`].
    Conv2d,
    /// [`MicroKernel::DepthwiseConv2d`].
    DepthwiseConv2d,
}

/// The TE declaration of `kernel`, lowered to loops (inputs `A`, `B`, output `C`).
pub fn declaration(kernel: MicroKernel) -> Result<PrimFunc> {
    thread_local! {
        static CACHE: RefCell<HashMap<MicroKernel, PrimFunc>> = RefCell::new(HashMap::new());
    }
    if let Some(f) = CACHE.with(|c| c.borrow().get(&kernel).cloned()) {
        return Ok(f);
    }
    let f = match kernel {
        MicroKernel::Gemm { m, n, k } => {
            let (m, n, k) = (m as usize, n as usize, k as usize);
            let mut g = Graph::new();
            let a = g.placeholder(&[m, k], DType::F32, "A")?;
            let b = g.placeholder(&[n, k], DType::F32, "B")?;
            let r = g.reduce_axis(k, "r")?;
            let c = g.compute(&[m, n], "C", |i| {
                super::sum(
                    a.at(&[i[0].clone(), r.into()]) * b.at(&[i[1].clone(), r.into()]),
                    &[r],
                )
            })?;
            super::lower(&g, &[c], kernel.name())?
        }
        MicroKernel::Conv2d {
            ci,
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            ..
        } => {
            let ext = operand_extents(kernel);
            let mut g = Graph::new();
            let w = g.placeholder(&ext[0], DType::F32, "W")?;
            let x = g.placeholder(&ext[1], DType::F32, "X")?;
            let rc = g.reduce_axis(ci as usize, "rc")?;
            let ry = g.reduce_axis(kh as usize, "ry")?;
            let rx = g.reduce_axis(kw as usize, "rx")?;
            let c = g.compute(&ext[2], "C", |i| {
                let [row, col] = window(i, [ry, rx], [sh, sw, dh, dw]);
                super::sum(
                    w.at(&[i[0].clone(), rc.into(), ry.into(), rx.into()])
                        * x.at(&[rc.into(), row, col]),
                    &[rc, ry, rx],
                )
            })?;
            super::lower(&g, &[c], kernel.name())?
        }
        MicroKernel::DepthwiseConv2d {
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            ..
        } => {
            let ext = operand_extents(kernel);
            let mut g = Graph::new();
            let w = g.placeholder(&ext[0], DType::F32, "W")?;
            let x = g.placeholder(&ext[1], DType::F32, "X")?;
            let ry = g.reduce_axis(kh as usize, "ry")?;
            let rx = g.reduce_axis(kw as usize, "rx")?;
            let c = g.compute(&ext[2], "C", |i| {
                let [row, col] = window(i, [ry, rx], [sh, sw, dh, dw]);
                super::sum(
                    w.at(&[i[0].clone(), ry.into(), rx.into()]) * x.at(&[i[0].clone(), row, col]),
                    &[ry, rx],
                )
            })?;
            super::lower(&g, &[c], kernel.name())?
        }
    };
    CACHE.with(|c| c.borrow_mut().insert(kernel, f.clone()));
    Ok(f)
}

/// The extents of `kernel`'s operands (`W`, `X`, `C`) as TE shapes.
fn operand_extents(kernel: MicroKernel) -> Vec<Vec<usize>> {
    kernel
        .operand_extents()
        .iter()
        .map(|e| e.iter().map(|&x| x as usize).collect())
        .collect()
}

/// The input row and column a convolution's output `(.., y, x)` reads at kernel tap
/// `(ry, rx)`: `y·sh + ry·dh`, `x·sw + rx·dw`.
fn window(i: &[Expr], [ry, rx]: [IterVar; 2], [sh, sw, dh, dw]: [i64; 4]) -> [Expr; 2] {
    [
        i[1].clone() * Expr::int(sh as i32) + Expr::from(ry) * Expr::int(dh as i32),
        i[2].clone() * Expr::int(sw as i32) + Expr::from(rx) * Expr::int(dw as i32),
    ]
}

/// How a stage matches the gemm declaration `C[i, j] = Σ_r A[.., i, .., r] · B[.., j, .., r]`.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmMatch {
    /// The stage's data dimensions playing `i` and `j`.
    pub dims: [usize; 2],
    /// The reduction axis `r`.
    pub r: IterVar,
    /// The other reduction axes, each of extent 1 (a 1×1 conv2d's kernel rows and
    /// columns): 0 in the call.
    pub units: Vec<IterVar>,
    /// `A` and `B`: the read, and the positions in its indices of (`i` or `j`, `r`).
    pub reads: [(Expr, [usize; 2]); 2],
}

/// Matches stage `op` against the gemm declaration: a float32 sum over one axis `r` of a
/// product of two tensor reads, each indexed by `r` once, by one data axis once (`i` for
/// the first, `j` for the second, distinct), and otherwise by other data axes or
/// constants. The error says what does not match.
pub fn match_gemm(g: &Graph, op: OpId) -> Result<GemmMatch> {
    let o = g.op(op)?;
    let no = |m: &str| Error::InvalidArgument(format!("tensorize gemm: stage `{}` {m}", o.name));
    if o.dtype != DType::F32 {
        return Err(no("is not float32"));
    }
    let Some(Expr::Reduce {
        kind: ReduceKind::Sum,
        value,
        axes,
    }) = o.body()
    else {
        return Err(no("is not a sum reduction"));
    };
    let extent = |a: &IterVar| g.iter_var(*a).map(|v| v.extent);
    let mut units = vec![];
    let mut long = vec![];
    for a in axes {
        if extent(a)? == 1 {
            units.push(*a);
        } else {
            long.push(*a);
        }
    }
    let r = match (&long[..], &units[..]) {
        ([r], _) => *r,
        ([], [u, ..]) => *u,
        _ => {
            return Err(no(
                "does not reduce over exactly one axis of extent above 1",
            ));
        }
    };
    units.retain(|u| *u != r);
    let Expr::Binary {
        op: BinOp::Mul,
        lhs,
        rhs,
    } = &**value
    else {
        return Err(no("does not sum a product"));
    };
    let data = o.axes();
    // Each read: the reduction's position, and its data axes (dimension of the stage,
    // position in the read's indices).
    type Read = (usize, Vec<(usize, usize)>);
    let read = |e: &Expr| -> Result<Read> {
        let Expr::Read { tensor, indices } = e else {
            return Err(no("multiplies something other than two tensor reads"));
        };
        if tensor.dtype() != DType::F32 {
            return Err(no("reads a tensor that is not float32"));
        }
        let (mut rpos, mut dvars) = (None, vec![]);
        for (p, ix) in indices.iter().enumerate() {
            match &without(ix, &units) {
                Expr::Var(v) if *v == r && rpos.is_none() => rpos = Some(p),
                Expr::Var(v) => match data.iter().position(|d| d == v) {
                    Some(d) if !dvars.iter().any(|x: &(usize, usize)| x.0 == d) => {
                        dvars.push((d, p))
                    }
                    _ => return Err(no("reads with an axis twice or an unknown axis")),
                },
                Expr::Int { .. } => {}
                _ => return Err(no("reads with an index that is not an axis or a constant")),
            }
        }
        let rpos = rpos.ok_or_else(|| no("reads a tensor without the reduction axis"))?;
        Ok((rpos, dvars))
    };
    let (ra, da) = read(lhs)?;
    let (rb, db) = read(rhs)?;
    // `i`: the last data axis A reads and B does not; `j` the other way round.
    let own = |x: &[(usize, usize)], y: &[(usize, usize)]| {
        x.iter()
            .rev()
            .find(|a| !y.iter().any(|b| b.0 == a.0))
            .copied()
    };
    let (Some((di, pa)), Some((dj, pb))) = (own(&da, &db), own(&db, &da)) else {
        return Err(no(
            "does not read each operand along a data axis of its own",
        ));
    };
    Ok(GemmMatch {
        dims: [di, dj],
        r,
        units,
        reads: [((**lhs).clone(), [pa, ra]), ((**rhs).clone(), [pb, rb])],
    })
}

/// How a stage matches the conv2d declaration
/// `C[p, y, x] = Σ_{c, u, v} W[.., p, c, u, v] · X[.., c, y·sh + u·dh, x·sw + v·dw]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Conv2dMatch {
    /// The stage's data dimensions playing `p`, `y` and `x`.
    pub dims: [usize; 3],
    /// The reduction axes `c`, `u`, `v`.
    pub red: [IterVar; 3],
    /// `sh`, `sw`, `dh`, `dw`.
    pub steps: [i64; 4],
    /// `W` and the positions in its indices of (`p`, `c`, `u`, `v`).
    pub w: (Expr, [usize; 4]),
    /// `X` and the positions in its indices of (`c`, row, column); for a depthwise
    /// conv2d, its channel index is `p + c` (and `c` has extent 1).
    pub x: (Expr, [usize; 3]),
    /// Whether the input's channel is the output's (`p + c`, a depthwise conv2d).
    pub depthwise: bool,
}

/// `e` as `Σ coef · var + constant` when it is one (sums, products by constants).
fn affine(e: &Expr) -> Option<(Vec<(IterVar, i64)>, i64)> {
    let scale = |(t, c): (Vec<(IterVar, i64)>, i64), k: i64| {
        (t.into_iter().map(|(v, x)| (v, x * k)).collect(), c * k)
    };
    match e {
        Expr::Var(v) => Some((vec![(*v, 1)], 0)),
        Expr::Int { value, .. } => Some((vec![], *value)),
        Expr::Binary { op, lhs, rhs } => {
            let (l, r) = (affine(lhs)?, affine(rhs)?);
            match op {
                BinOp::Add => {
                    let mut t = l.0;
                    for (v, x) in r.0 {
                        match t.iter_mut().find(|a| a.0 == v) {
                            Some(a) => a.1 += x,
                            None => t.push((v, x)),
                        }
                    }
                    t.retain(|a| a.1 != 0);
                    Some((t, l.1 + r.1))
                }
                BinOp::Mul if l.0.is_empty() => Some(scale(r, l.1)),
                BinOp::Mul if r.0.is_empty() => Some(scale(l, r.1)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Matches stage `op` against the conv2d declaration (a group-1 `nn.conv2d` compute over
/// a materialized, padded input): a float32 sum over three axes `c`, `u`, `v` of the
/// product of a weight read indexed by one data axis `p` and by `c`, `u`, `v` each alone,
/// and an input read indexed by `c` alone, by `y·sh + u·dh` and by `x·sw + v·dw` for two
/// other data axes `y`, `x` (the earlier index is the row), every other index of either
/// read a constant or (the input's) a data axis of its own. The error says what does not
/// match.
pub fn match_conv2d(g: &Graph, op: OpId) -> Result<Conv2dMatch> {
    let o = g.op(op)?;
    let no = |m: &str| Error::InvalidArgument(format!("tensorize conv2d: stage `{}` {m}", o.name));
    if o.dtype != DType::F32 {
        return Err(no("is not float32"));
    }
    let Some(Expr::Reduce {
        kind: ReduceKind::Sum,
        value,
        axes,
    }) = o.body()
    else {
        return Err(no("is not a sum reduction"));
    };
    if axes.len() != 3 {
        return Err(no("does not reduce over three axes"));
    }
    let Expr::Binary {
        op: BinOp::Mul,
        lhs,
        rhs,
    } = &**value
    else {
        return Err(no("does not sum a product"));
    };
    let data = o.axes();
    let reads = |e: &Expr| -> Option<Vec<(Vec<(IterVar, i64)>, i64)>> {
        match e {
            Expr::Read { tensor, indices } if tensor.dtype() == DType::F32 => {
                indices.iter().map(affine).collect()
            }
            _ => None,
        }
    };
    let try_order = |we: &Expr, xe: &Expr| -> Option<Conv2dMatch> {
        let (wi, xi) = (reads(we)?, reads(xe)?);
        let alone = |ix: &(Vec<(IterVar, i64)>, i64), v: IterVar| ix.0 == [(v, 1)];
        // W: p, c, u, v each alone; the rest constant.
        let mut wpos = [usize::MAX; 4];
        let mut p = None;
        for (k, ix) in wi.iter().enumerate() {
            match &ix.0[..] {
                [] => {}
                [(v, 1)] if axes.contains(v) => {
                    let slot = 1 + axes.iter().position(|a| a == v)?;
                    if wpos[slot] != usize::MAX {
                        return None;
                    }
                    wpos[slot] = k;
                }
                [(v, 1)] if p.is_none() && data.contains(v) => {
                    p = Some(*v);
                    wpos[0] = k;
                }
                _ => return None,
            }
        }
        let p = p?;
        if wpos.contains(&usize::MAX) {
            return None;
        }
        // X: c alone, then the row and column (data axis + reduction axis), the rest
        // constants or other data axes alone.
        let (c, u, v) = (axes[0], axes[1], axes[2]);
        let mut xpos = [usize::MAX; 3];
        let mut yx: Vec<(IterVar, i64, i64)> = vec![];
        let mut others: Vec<IterVar> = vec![];
        let mut depthwise = false;
        let pc = |ix: &(Vec<(IterVar, i64)>, i64)| {
            ix.0.len() == 2 && ix.0.contains(&(p, 1)) && ix.0.contains(&(c, 1))
        };
        for (k, ix) in xi.iter().enumerate() {
            if alone(ix, c) && xpos[0] == usize::MAX {
                xpos[0] = k;
                continue;
            }
            if pc(ix) && xpos[0] == usize::MAX && g.iter_var(c).is_ok_and(|v| v.extent == 1) {
                xpos[0] = k;
                depthwise = true;
                continue;
            }
            match &ix.0[..] {
                [] => {}
                [(d, 1)] if data.contains(d) && *d != p && !others.contains(d) => others.push(*d),
                [(a, ka), (b, kb)] => {
                    let (dv, dk, rv, rk) = if data.contains(a) {
                        (*a, *ka, *b, *kb)
                    } else {
                        (*b, *kb, *a, *ka)
                    };
                    let slot = match yx.len() {
                        0 => u,
                        1 => v,
                        _ => return None,
                    };
                    if !data.contains(&dv) || dv == p || rv != slot || dk < 1 || rk < 1 {
                        return None;
                    }
                    xpos[1 + yx.len()] = k;
                    yx.push((dv, dk, rk));
                }
                _ => return None,
            }
        }
        if xpos.contains(&usize::MAX) || yx.len() != 2 {
            return None;
        }
        let (y, x) = (yx[0].0, yx[1].0);
        if y == x || others.contains(&y) || others.contains(&x) {
            return None;
        }
        let dim = |a: IterVar| data.iter().position(|d| *d == a);
        Some(Conv2dMatch {
            dims: [dim(p)?, dim(y)?, dim(x)?],
            red: [c, u, v],
            steps: [yx[0].1, yx[1].1, yx[0].2, yx[1].2],
            w: (we.clone(), wpos),
            x: (xe.clone(), xpos),
            depthwise,
        })
    };
    try_order(lhs, rhs)
        .or_else(|| try_order(rhs, lhs))
        .ok_or_else(|| {
            no("does not read weights [p, c, u, v] and an input [c, y·s + u·d, x·s + v·d]")
        })
}

/// What a tensorized call of stage `op` walks: the stage's data dimensions the call
/// covers (others must have extent 1 at the call), the axes bound to 0 in the reads'
/// bases, each read with the buffer dimensions its declared axes walk, and the kernel
/// for the stage's `extents` at the call.
#[allow(clippy::type_complexity)]
pub fn call_shape(
    g: &Graph,
    op: OpId,
    intrin: Intrin,
    extents: &[usize],
) -> Result<(
    Vec<usize>,
    Vec<IterVar>,
    Vec<(Expr, Vec<usize>)>,
    MicroKernel,
)> {
    let extent = |a: IterVar| g.iter_var(a).map(|v| v.extent as i64);
    Ok(match intrin {
        Intrin::Gemm => {
            let m = match_gemm(g, op)?;
            let mut zeroed = m.units.clone();
            zeroed.push(m.r);
            let kernel = MicroKernel::Gemm {
                m: extents[m.dims[0]] as i64,
                n: extents[m.dims[1]] as i64,
                k: extent(m.r)?,
            };
            let reads = m
                .reads
                .iter()
                .map(|(e, a)| (e.clone(), a.to_vec()))
                .collect();
            (m.dims.to_vec(), zeroed, reads, kernel)
        }
        Intrin::Conv2d | Intrin::DepthwiseConv2d => {
            let m = match_conv2d(g, op)?;
            if m.depthwise != (intrin == Intrin::DepthwiseConv2d) {
                return Err(Error::InvalidArgument(format!(
                    "tensorize {intrin:?}: stage `{}` is {}a depthwise conv2d",
                    g.op(op)?.name,
                    if m.depthwise { "" } else { "not " }
                )));
            }
            let [sh, sw, dh, dw] = m.steps;
            if m.depthwise {
                let kernel = MicroKernel::DepthwiseConv2d {
                    o: extents[m.dims[0]] as i64,
                    h: extents[m.dims[1]] as i64,
                    w: extents[m.dims[2]] as i64,
                    kh: extent(m.red[1])?,
                    kw: extent(m.red[2])?,
                    sh,
                    sw,
                    dh,
                    dw,
                };
                let [wp, _, wu, wv] = m.w.1;
                let reads = vec![(m.w.0, vec![wp, wu, wv]), (m.x.0, m.x.1.to_vec())];
                return Ok((m.dims.to_vec(), m.red.to_vec(), reads, kernel));
            }
            let kernel = MicroKernel::Conv2d {
                o: extents[m.dims[0]] as i64,
                h: extents[m.dims[1]] as i64,
                w: extents[m.dims[2]] as i64,
                ci: extent(m.red[0])?,
                kh: extent(m.red[1])?,
                kw: extent(m.red[2])?,
                sh,
                sw,
                dh,
                dw,
            };
            let reads = vec![(m.w.0, m.w.1.to_vec()), (m.x.0, m.x.1.to_vec())];
            (m.dims.to_vec(), m.red.to_vec(), reads, kernel)
        }
    })
}

/// `e` with the axes `units` set to 0, folding `x + 0` and `x * 0`.
fn without(e: &Expr, units: &[IterVar]) -> Expr {
    let zero = |e: &Expr| matches!(e, Expr::Int { value: 0, .. });
    match e {
        Expr::Var(v) if units.contains(v) => Expr::Int {
            value: 0,
            dtype: DType::I32,
        },
        Expr::Binary { op, lhs, rhs } => {
            let (l, r) = (without(lhs, units), without(rhs, units));
            match op {
                BinOp::Add if zero(&l) => r,
                BinOp::Add if zero(&r) => l,
                BinOp::Mul if zero(&l) || zero(&r) => Expr::Int {
                    value: 0,
                    dtype: DType::I32,
                },
                _ => Expr::Binary {
                    op: *op,
                    lhs: Box::new(l),
                    rhs: Box::new(r),
                },
            }
        }
        _ => e.clone(),
    }
}

impl Schedule {
    /// Lowers stage `t` to one call of the micro-kernel `intrin` over its region instead
    /// of its loop nest (the stage's own splits and loop kinds no longer apply). Refused
    /// when the stage does not match the kernel's declaration, when a stage is attached
    /// inside it, or when it reads an inlined stage (the call needs buffers).
    pub fn tensorize(&mut self, t: Tensor, intrin: Intrin) -> Result<()> {
        let op = t.op();
        let name = self.op_name(op);
        let (_, _, reads, _) = call_shape(&self.graph, op, intrin, &self.graph.op(op)?.shape)?;
        for (read, _) in &reads {
            let Expr::Read { tensor: x, .. } = read else {
                continue;
            };
            if self.stage_of(x.op()).attach == Attach::Inline {
                return Err(Error::InvalidArgument(format!(
                    "tensorize: stage `{name}` reads `{}`, which is inlined (the micro-kernel reads buffers)",
                    self.op_name(x.op())
                )));
            }
        }
        if self.stage_of(op).attach == Attach::Inline {
            return Err(Error::InvalidArgument(format!(
                "tensorize: stage `{name}` is inlined"
            )));
        }
        if self
            .stages
            .iter()
            .any(|s| matches!(s.attach, Attach::At { parent, .. } if parent == op))
        {
            return Err(Error::InvalidArgument(format!(
                "tensorize: a stage is computed at `{name}`; a tensorized stage has no loops to attach to"
            )));
        }
        self.stages[op.index()].tensorize = Some(intrin);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use kiln_ir::NDArray;
    use proptest::prelude::*;

    use super::*;
    use crate::tir::{self, interp};

    /// `C[i, j] = Σ_r A[i, r] · B[j, r]` (dense) or `Σ_r A[i, r] · B[r, j]`, scheduled
    /// plainly, or tiled `tm × tn` with the anchor tensorized at the tile.
    fn kernel(m: usize, n: usize, k: usize, nt: bool, tile: Option<(usize, usize)>) -> PrimFunc {
        let mut g = Graph::new();
        let a = g.placeholder(&[m, k], DType::F32, "A").unwrap();
        let bshape = if nt { [n, k] } else { [k, n] };
        let b = g.placeholder(&bshape, DType::F32, "B").unwrap();
        let r = g.reduce_axis(k, "r").unwrap();
        let c = g
            .compute(&[m, n], "C", |i| {
                let bi = if nt {
                    [i[1].clone(), r.into()]
                } else {
                    [r.into(), i[1].clone()]
                };
                super::super::sum(a.at(&[i[0].clone(), r.into()]) * b.at(&bi), &[r])
            })
            .unwrap();
        let out = g.compute(&[m, n], "out", |i| c.at(i) + 1.0f32).unwrap();
        let mut s = Schedule::new(&g, &[out]).unwrap();
        if let Some((tm, tn)) = tile {
            let [i, j] = [s.axis(out, 0).unwrap(), s.axis(out, 1).unwrap()];
            let (io, ii) = s.split(out, i, tm).unwrap();
            let (jo, ji) = s.split(out, j, tn).unwrap();
            s.reorder(out, &[io, jo, ii, ji]).unwrap();
            s.compute_at(c, out, jo).unwrap();
            s.tensorize(c, Intrin::Gemm).unwrap();
        }
        let f = s.lower("k").unwrap();
        tir::verify(&f).unwrap();
        f
    }

    #[test]
    fn declaration_is_the_gemm_compute() {
        let f = declaration(MicroKernel::Gemm { m: 2, n: 3, k: 4 }).unwrap();
        tir::verify(&f).unwrap();
        let a = NDArray::random([2, 4], DType::F32, 1);
        let b = NDArray::random([3, 4], DType::F32, 2);
        let c = interp::run_with_inputs(&f, &[a.clone(), b.clone()]).unwrap();
        let (a, b, c) = (
            a.to_vec::<f32>().unwrap(),
            b.to_vec::<f32>().unwrap(),
            c[0].to_vec::<f32>().unwrap(),
        );
        for i in 0..2 {
            for j in 0..3 {
                let want: f32 = (0..4).map(|r| a[i * 4 + r] * b[j * 4 + r]).sum();
                assert!((c[i * 3 + j] - want).abs() <= 1e-6, "{i} {j}");
            }
        }
    }

    #[test]
    fn tensorized_text_round_trips_and_names_the_call() {
        let f = kernel(8, 12, 5, true, Some((4, 6)));
        let text = f.to_string();
        assert!(
            text.contains(
                "microkernel gemm(m=4, n=6, k=5, %A[%i.outer * 4, 0] axes(0, 1), \
                 %B[%j.outer * 6, 0] axes(0, 1), %C[0, 0] axes(0, 1))"
            ),
            "{text}"
        );
        let back = tir::parse(&text).unwrap();
        assert_eq!(back.to_string(), text);
    }

    #[test]
    fn a_call_outside_its_buffers_is_refused() {
        let f = kernel(8, 12, 5, true, Some((4, 6)));
        // Shift A's region one row down: its last tile reads row 8 of 8.
        let text = f
            .to_string()
            .replace("%A[%i.outer * 4, 0]", "%A[%i.outer * 4 + 1, 0]");
        assert!(text.contains("+ 1, 0] axes"), "{text}");
        let bad = tir::parse(&text).unwrap();
        let e = tir::verify(&bad).unwrap_err().to_string();
        assert!(e.contains("buffer %A has extent 8 in dim 0"), "{e}");
        // A declared extent larger than the buffer is refused before any proof.
        let text = f.to_string().replace("k=5", "k=6");
        let e = tir::verify(&tir::parse(&text).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("exceeds dimension"), "{e}");
        // Axes must be two distinct dimensions.
        let text = f.to_string().replacen("axes(0, 1)", "axes(1, 1)", 1);
        let e = tir::verify(&tir::parse(&text).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("distinct"), "{e}");
    }

    #[test]
    fn refused_where_the_stage_does_not_match() {
        let mut g = Graph::new();
        let a = g.placeholder(&[4, 4], DType::F32, "A").unwrap();
        let r = g.reduce_axis(4, "r").unwrap();
        let c = g
            .compute(&[4], "C", |i| {
                super::super::max(a.at(&[i[0].clone(), r.into()]), &[r])
            })
            .unwrap();
        let mut s = Schedule::new(&g, &[c]).unwrap();
        let e = s.tensorize(c, Intrin::Gemm).unwrap_err().to_string();
        assert!(e.contains("not a sum reduction"), "{e}");
    }

    /// A 1×1 conv2d (`[1, c, 1, w]` input, `[o, c, 1, 1]` weights): its kernel rows and
    /// columns are reduction axes of extent 1, which the call binds to 0.
    #[test]
    fn one_by_one_conv2d_tensorizes() {
        let (c, w, o) = (5, 7, 3);
        let mut g = Graph::new();
        let x = g.placeholder(&[1, c, 1, w], DType::F32, "X").unwrap();
        let wt = g.placeholder(&[o, c, 1, 1], DType::F32, "W").unwrap();
        let rc = g.reduce_axis(c, "rc").unwrap();
        let ry = g.reduce_axis(1, "ry").unwrap();
        let rx = g.reduce_axis(1, "rx").unwrap();
        let y = g
            .compute(&[1, o, 1, w], "Y", |i| {
                super::super::sum(
                    x.at(&[
                        i[0].clone(),
                        rc.into(),
                        i[2].clone() + Expr::from(ry),
                        i[3].clone() + Expr::from(rx),
                    ]) * wt.at(&[i[1].clone(), rc.into(), ry.into(), rx.into()]),
                    &[rc, ry, rx],
                )
            })
            .unwrap();
        let m = match_gemm(&g, y.op()).unwrap();
        assert_eq!((m.dims, m.r, m.units.clone()), ([3, 1], rc, vec![ry, rx]));
        let plain = Schedule::new(&g, &[y]).unwrap().lower("plain").unwrap();
        let mut s = Schedule::new(&g, &[y]).unwrap();
        s.tensorize(y, Intrin::Gemm).unwrap();
        let f = s.lower("conv").unwrap();
        tir::verify(&f).unwrap();
        assert!(
            f.to_string().contains("microkernel gemm(m=7, n=3, k=5"),
            "{f}"
        );
        let ins = [
            NDArray::random([1, c, 1, w], DType::F32, 5),
            NDArray::random([o, c, 1, 1], DType::F32, 6),
        ];
        let want = interp::run_with_inputs(&plain, &ins).unwrap();
        let got = interp::run_with_inputs(&f, &ins).unwrap();
        assert!(got[0].allclose(&want[0], 1e-5, 1e-5).is_ok());
    }

    /// `Y[0, p, y, x] = Σ X[0, c, y·sh + u·dh, x·sw + v·dw] · W[p, c, u, v]` (the topi
    /// conv2d form over an already padded input), scheduled plainly, or with the output
    /// tiled `tp × ty × tx` and the conv tensorized at the tile.
    #[allow(clippy::too_many_arguments)]
    fn conv(
        o: usize,
        (c, kh, kw): (usize, usize, usize),
        (oh, ow): (usize, usize),
        [sh, sw, dh, dw]: [usize; 4],
        tile: Option<[usize; 3]>,
    ) -> PrimFunc {
        let (h, w) = (
            (oh - 1) * sh + (kh - 1) * dh + 1,
            (ow - 1) * sw + (kw - 1) * dw + 1,
        );
        let mut g = Graph::new();
        let x = g.placeholder(&[1, c, h, w], DType::F32, "X").unwrap();
        let wt = g.placeholder(&[o, c, kh, kw], DType::F32, "W").unwrap();
        let rc = g.reduce_axis(c, "rc").unwrap();
        let ry = g.reduce_axis(kh, "ry").unwrap();
        let rx = g.reduce_axis(kw, "rx").unwrap();
        let k = |v: usize| Expr::int(v as i32);
        let y = g
            .compute(&[1, o, oh, ow], "Y", |i| {
                super::super::sum(
                    x.at(&[
                        i[0].clone(),
                        rc.into(),
                        i[2].clone() * k(sh) + Expr::from(ry) * k(dh),
                        i[3].clone() * k(sw) + Expr::from(rx) * k(dw),
                    ]) * wt.at(&[i[1].clone(), rc.into(), ry.into(), rx.into()]),
                    &[rc, ry, rx],
                )
            })
            .unwrap();
        let out = g
            .compute(&[1, o, oh, ow], "out", |i| y.at(i) + 1.0f32)
            .unwrap();
        let mut s = Schedule::new(&g, &[out]).unwrap();
        if let Some([tp, ty, tx]) = tile {
            let ax: Vec<_> = (0..4).map(|d| s.axis(out, d).unwrap()).collect();
            let (po, pi) = s.split(out, ax[1], tp).unwrap();
            let (yo, yi) = s.split(out, ax[2], ty).unwrap();
            let (xo, xi) = s.split(out, ax[3], tx).unwrap();
            s.reorder(out, &[ax[0], po, yo, xo, pi, yi, xi]).unwrap();
            s.compute_at(y, out, xo).unwrap();
            s.tensorize(y, Intrin::Conv2d).unwrap();
        }
        let f = s.lower("k").unwrap();
        tir::verify(&f).unwrap();
        f
    }

    #[test]
    fn conv2d_declaration_matches_and_round_trips() {
        let f = conv(4, (3, 3, 3), (4, 6), [2, 1, 1, 2], Some([2, 2, 3]));
        let text = f.to_string();
        assert!(
            text.contains(
                "microkernel conv2d(o=2, h=2, w=3, ci=3, kh=3, kw=3, sh=2, sw=1, dh=1, dw=2"
            ),
            "{text}"
        );
        assert!(text.contains("axes(0, 1, 2, 3)"), "{text}");
        let back = tir::parse(&text).unwrap();
        assert_eq!(back.to_string(), text);
        // Grouped conv2d (the input channel depends on the output channel) does not match.
        let mut g = Graph::new();
        let x = g.placeholder(&[1, 4, 3, 3], DType::F32, "X").unwrap();
        let wt = g.placeholder(&[4, 2, 1, 1], DType::F32, "W").unwrap();
        let rc = g.reduce_axis(2, "rc").unwrap();
        let ry = g.reduce_axis(1, "ry").unwrap();
        let rx = g.reduce_axis(1, "rx").unwrap();
        let y = g
            .compute(&[1, 4, 3, 3], "Y", |i| {
                super::super::sum(
                    x.at(&[
                        i[0].clone(),
                        i[1].clone().floordiv(Expr::int(2)) * Expr::int(2) + Expr::from(rc),
                        i[2].clone() + Expr::from(ry),
                        i[3].clone() + Expr::from(rx),
                    ]) * wt.at(&[i[1].clone(), rc.into(), ry.into(), rx.into()]),
                    &[rc, ry, rx],
                )
            })
            .unwrap();
        let e = match_conv2d(&g, y.op()).unwrap_err().to_string();
        assert!(e.contains("does not read weights"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The tensorized kernel computes what the untensorized one does (loop-IR
        /// interpreter), over ragged sizes and tiles below one register block.
        #[test]
        fn tensorized_matches_untensorized(
            mt in 1usize..5, nt_ in 1usize..7, mo in 1usize..4, no in 1usize..3,
            k in 1usize..20, nt in any::<bool>()
        ) {
            let (m, n) = (mt * mo, nt_ * no);
            let plain = kernel(m, n, k, nt, None);
            let tiled = kernel(m, n, k, nt, Some((mt, nt_)));
            prop_assert!(tiled.to_string().contains("microkernel gemm"));
            let bshape = if nt { [n, k] } else { [k, n] };
            let ins = [NDArray::random([m, k], DType::F32, 3), NDArray::random(bshape, DType::F32, 4)];
            let want = interp::run_with_inputs(&plain, &ins).unwrap();
            let got = interp::run_with_inputs(&tiled, &ins).unwrap();
            prop_assert!(got[0].allclose(&want[0], 1e-5, 1e-5).is_ok());
        }

        /// A depthwise conv2d (`X[0, p + c, ..]`, `c` of extent 1) tensorized at ragged
        /// tiles computes what the untensorized one does.
        #[test]
        fn tensorized_depthwise_matches_untensorized(
            tp in 1usize..4, po in 1usize..3, ty in 1usize..3, yo in 1usize..3,
            tx in 1usize..5, xo in 1usize..3, kh in 1usize..4, kw in 1usize..4,
            steps in proptest::array::uniform4(1usize..3)
        ) {
            let (o, oh, ow) = (tp * po, ty * yo, tx * xo);
            let [sh, sw, dh, dw] = steps;
            let (h, w) = ((oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1);
            let build = |tile: bool| {
                let mut g = Graph::new();
                let x = g.placeholder(&[1, o, h, w], DType::F32, "X").unwrap();
                let wt = g.placeholder(&[o, 1, kh, kw], DType::F32, "W").unwrap();
                let rc = g.reduce_axis(1, "rc").unwrap();
                let ry = g.reduce_axis(kh, "ry").unwrap();
                let rx = g.reduce_axis(kw, "rx").unwrap();
                let k = |v: usize| Expr::int(v as i32);
                let y = g.compute(&[1, o, oh, ow], "Y", |i| {
                    super::super::sum(
                        x.at(&[
                            i[0].clone(),
                            i[1].clone() + Expr::from(rc),
                            i[2].clone() * k(sh) + Expr::from(ry) * k(dh),
                            i[3].clone() * k(sw) + Expr::from(rx) * k(dw),
                        ]) * wt.at(&[i[1].clone(), rc.into(), ry.into(), rx.into()]),
                        &[rc, ry, rx],
                    )
                }).unwrap();
                let out = g.compute(&[1, o, oh, ow], "out", |i| y.at(i) + 1.0f32).unwrap();
                let mut s = Schedule::new(&g, &[out]).unwrap();
                if tile {
                    let ax: Vec<_> = (0..4).map(|d| s.axis(out, d).unwrap()).collect();
                    let (po, pi) = s.split(out, ax[1], tp).unwrap();
                    let (yo, yi) = s.split(out, ax[2], ty).unwrap();
                    let (xo, xi) = s.split(out, ax[3], tx).unwrap();
                    s.reorder(out, &[ax[0], po, yo, xo, pi, yi, xi]).unwrap();
                    s.compute_at(y, out, xo).unwrap();
                    assert!(s.tensorize(y, Intrin::Conv2d).is_err());
                    s.tensorize(y, Intrin::DepthwiseConv2d).unwrap();
                }
                let f = s.lower("k").unwrap();
                tir::verify(&f).unwrap();
                f
            };
            let (plain, tiled) = (build(false), build(true));
            prop_assert!(tiled.to_string().contains("microkernel depthwise_conv2d"));
            prop_assert!(tir::parse(&tiled.to_string()).unwrap().to_string() == tiled.to_string());
            let ins = [
                NDArray::random([1, o, h, w], DType::F32, 10),
                NDArray::random([o, 1, kh, kw], DType::F32, 11),
            ];
            let want = interp::run_with_inputs(&plain, &ins).unwrap();
            let got = interp::run_with_inputs(&tiled, &ins).unwrap();
            prop_assert!(got[0].allclose(&want[0], 1e-5, 1e-5).is_ok());
        }

        /// A conv2d tensorized at ragged tiles computes what the untensorized one does.
        #[test]
        fn tensorized_conv2d_matches_untensorized(
            tp in 1usize..4, po in 1usize..3, ty in 1usize..3, yo in 1usize..3,
            tx in 1usize..5, xo in 1usize..3, c in 1usize..4, kh in 1usize..4,
            kw in 1usize..4, steps in proptest::array::uniform4(1usize..3)
        ) {
            let (o, oh, ow) = (tp * po, ty * yo, tx * xo);
            let plain = conv(o, (c, kh, kw), (oh, ow), steps, None);
            let tiled = conv(o, (c, kh, kw), (oh, ow), steps, Some([tp, ty, tx]));
            prop_assert!(tiled.to_string().contains("microkernel conv2d"));
            let [sh, sw, dh, dw] = steps;
            let (h, w) = ((oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1);
            let ins = [
                NDArray::random([1, c, h, w], DType::F32, 8),
                NDArray::random([o, c, kh, kw], DType::F32, 9),
            ];
            let want = interp::run_with_inputs(&plain, &ins).unwrap();
            let got = interp::run_with_inputs(&tiled, &ins).unwrap();
            prop_assert!(got[0].allclose(&want[0], 1e-5, 1e-5).is_ok());
        }
    }
}
