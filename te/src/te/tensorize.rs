//! Tensorize (TVM's primitive): a stage whose computation matches a micro-kernel's
//! declaration is lowered to one `microkernel` call over the stage's region instead of
//! its loop nest.
//!
//! Each [`MicroKernel`] is declared here as a TE compute ([`declaration`]); that
//! declaration is the call's meaning everywhere (the loop-IR `expand`, the verifier, the
//! interpreters). [`Schedule::tensorize`] checks the stage's body against the declaration
//! ([`match_gemm`]) and marks it; [`lower`](mod@super::lower) then emits the call with the
//! sizes of the stage's region at its compute_at point.

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
    };
    CACHE.with(|c| c.borrow_mut().insert(kernel, f.clone()));
    Ok(f)
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
        match intrin {
            Intrin::Gemm => {
                let m = match_gemm(&self.graph, op)?;
                for (read, _) in &m.reads {
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
    }
}
