//! Params format against the real TVM and under fuzzing.
//!
//! `fixtures/tvm_params.params` was written by TVM's own `save_param_dict`
//! (`scripts/make_params_fixture.py`); `fixtures/tvm_params.json` lists what it holds. Kiln
//! must read every name, dtype, shape and value, and write the same bytes back. The fuzz
//! properties feed random bytes, truncations and byte flips of valid files to the readers:
//! they must return, never panic, and truncations must always be refused.

use std::collections::BTreeMap;

use kiln_executor::Error;
use kiln_executor::params::{
    BoolEncoding, load_ndarray, load_params, save_ndarray, save_params, save_params_with,
};
use kiln_ir::{DType, NDArray};
use proptest::prelude::*;

const FIXTURE: &[u8] = include_bytes!("fixtures/tvm_params.params");
const MANIFEST: &str = include_str!("fixtures/tvm_params.json");

/// The tensors the manifest describes, built from its values.
fn manifest_tensors() -> BTreeMap<String, NDArray> {
    let manifest: serde_json::Value = serde_json::from_str(MANIFEST).unwrap();
    let mut out = BTreeMap::new();
    for t in manifest["tensors"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap().to_string();
        let dtype: DType = t["dtype"].as_str().unwrap().parse().unwrap();
        let shape: Vec<usize> = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let values = t["values"].as_array().unwrap();
        let array = match dtype {
            DType::Bool => {
                NDArray::from_vec(shape, values.iter().map(|v| v.as_bool().unwrap()).collect())
            }
            d if d.is_float() => NDArray::from_f64(
                shape,
                d,
                values.iter().map(|v| v.as_f64().unwrap()).collect(),
            ),
            d => NDArray::from_f64(
                shape,
                d,
                values.iter().map(|v| v.as_i64().unwrap() as f64).collect(),
            ),
        }
        .unwrap();
        out.insert(name, array);
    }
    out
}

#[test]
fn fixture_was_made_by_tvm() {
    let manifest: serde_json::Value = serde_json::from_str(MANIFEST).unwrap();
    let version = manifest["tvm_version"].as_str().unwrap();
    assert!(version.starts_with("0."), "{version}");
}

#[test]
fn tvm_fixture_loads_with_every_name_dtype_shape_and_value() {
    let loaded = load_params(FIXTURE).unwrap();
    let want = manifest_tensors();
    assert_eq!(
        loaded.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    let dtypes: Vec<DType> = loaded.values().map(|a| a.dtype()).collect();
    // The fixture (written by TVM) holds the dtypes kiln had when it was made; the
    // later ones (float64, bfloat16, int16, uint16/32/64) round-trip in the property
    // test below, which draws from every dtype.
    use DType::*;
    for d in [F32, F16, I8, U8, I32, I64, Bool] {
        assert!(dtypes.contains(&d), "fixture lacks {d}");
    }
    for (name, array) in &want {
        let got = &loaded[name];
        assert_eq!(got.dtype(), array.dtype(), "{name}");
        assert_eq!(got.shape(), array.shape(), "{name}");
        // Exact: the fixture values are all representable in their dtypes.
        assert_eq!(got, array, "{name}");
    }
    // Spot checks that do not go through the manifest.
    assert_eq!(loaded["int32.scalar"].shape(), &[] as &[usize]);
    assert_eq!(
        loaded["int32.scalar"].to_vec::<i32>().unwrap(),
        vec![-123456789]
    );
    assert_eq!(
        loaded["int64.vec"].to_vec::<i64>().unwrap(),
        vec![-(1i64 << 62), -1, 0, (1i64 << 40) + 7]
    );
    assert_eq!(loaded["empty"].shape(), &[0, 3]);
}

#[test]
fn resaving_the_tvm_fixture_gives_the_same_bytes() {
    let loaded = load_params(FIXTURE).unwrap();
    // The TVM that made the fixture (0.20+) writes bool as kDLBool.
    assert_eq!(save_params_with(&loaded, BoolEncoding::DlBool), FIXTURE);
    // The same values, built independently from the manifest, also give the same bytes.
    assert_eq!(
        save_params_with(&manifest_tensors(), BoolEncoding::DlBool),
        FIXTURE
    );
}

#[test]
fn relay_era_bool_encoding_differs_only_in_the_bool_dtype() {
    let loaded = load_params(FIXTURE).unwrap();
    let old = save_params(&loaded);
    assert_eq!(old.len(), FIXTURE.len());
    let diffs: Vec<usize> = (0..old.len()).filter(|&i| old[i] != FIXTURE[i]).collect();
    assert_eq!(diffs.len(), 2, "{diffs:?}");
    assert_eq!(diffs[1], diffs[0] + 1);
    assert_eq!(&FIXTURE[diffs[0]..diffs[0] + 2], &[6, 8]);
    assert_eq!(&old[diffs[0]..diffs[0] + 2], &[1, 1]);
    assert_eq!(load_params(&old).unwrap(), loaded);
}

#[test]
fn every_truncation_of_the_fixture_is_refused_at_or_before_the_cut() {
    for cut in 0..FIXTURE.len() {
        match load_params(&FIXTURE[..cut]) {
            Err(Error::InvalidParams { offset, message }) => {
                assert!(offset <= cut, "cut {cut}: offset {offset}: {message}");
                assert!(message.contains("remain"), "cut {cut}: {message}");
            }
            other => panic!("cut {cut}: expected a truncation error, got {other:?}"),
        }
    }
}

fn dtype_strategy() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn array_strategy() -> impl Strategy<Value = NDArray> {
    (
        dtype_strategy(),
        prop::collection::vec(0usize..4, 0..4),
        any::<u64>(),
    )
        .prop_map(|(dtype, shape, seed)| NDArray::random(shape, dtype, seed))
}

fn params_strategy() -> impl Strategy<Value = BTreeMap<String, NDArray>> {
    prop::collection::btree_map("[a-z0-9_.]{0,12}", array_strategy(), 0..5)
}

/// Loads, and if that works, checks that saving and loading again is a fixed point.
fn load_is_stable(bytes: &[u8]) {
    if let Ok(p) = load_params(bytes) {
        let again = save_params(&p);
        let reloaded = load_params(&again).expect("kiln reads what it wrote");
        assert_eq!(save_params(&reloaded), again);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_params_round_trip(p in params_strategy(), dl_bool in any::<bool>()) {
        let enc = if dl_bool { BoolEncoding::DlBool } else { BoolEncoding::Uint1 };
        let bytes = save_params_with(&p, enc);
        let loaded = load_params(&bytes).unwrap();
        prop_assert_eq!(save_params_with(&loaded, enc), bytes);
        prop_assert_eq!(loaded.keys().collect::<Vec<_>>(), p.keys().collect::<Vec<_>>());
        for (name, a) in &p {
            prop_assert_eq!(a.to_le_bytes(), loaded[name].to_le_bytes());
            prop_assert_eq!(a.shape(), loaded[name].shape());
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = load_params(&bytes);
        let _ = load_ndarray(&bytes);
    }

    #[test]
    fn random_bytes_after_a_valid_header_never_panic(
        tail in prop::collection::vec(any::<u8>(), 0..256),
        ndarray in any::<bool>(),
    ) {
        // Past the magic, so the reader goes deep into the fields.
        let mut bytes = if ndarray {
            0xDD5E40F096B4A13Fu64.to_le_bytes().to_vec()
        } else {
            0xF7E58D4F05049CB7u64.to_le_bytes().to_vec()
        };
        bytes.extend(tail);
        let _ = load_params(&bytes);
        let _ = load_ndarray(&bytes);
    }

    #[test]
    fn truncations_are_refused(p in params_strategy(), frac in 0.0f64..1.0) {
        let bytes = save_params(&p);
        let cut = (bytes.len() as f64 * frac) as usize;
        prop_assert!(cut < bytes.len());
        prop_assert!(load_params(&bytes[..cut]).is_err());
    }

    #[test]
    fn byte_flips_never_panic(
        p in params_strategy(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let mut bytes = save_params(&p);
        for (i, x) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= x;
        }
        load_is_stable(&bytes);
    }

    /// Overwrites a field-sized window with an extreme value: lying counts, sizes, ndims.
    #[test]
    fn extreme_field_values_never_panic_or_overallocate(
        at in any::<prop::sample::Index>(),
        value in prop::sample::select(vec![
            0u64, 1, 2, 64, 65, u32::MAX as u64, i32::MAX as u64, 1 << 31, 1 << 56, 1 << 62,
            i64::MAX as u64, i64::MIN as u64, u64::MAX, u64::MAX - 7,
        ]),
        width in prop::sample::select(vec![1usize, 2, 4, 8]),
    ) {
        let mut bytes = FIXTURE.to_vec();
        let at = at.index(bytes.len() - width + 1);
        bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        load_is_stable(&bytes);
    }

    #[test]
    fn fixture_byte_flips_never_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let mut bytes = FIXTURE.to_vec();
        for (i, x) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= x;
        }
        load_is_stable(&bytes);
    }

    #[test]
    fn single_tensors_round_trip_and_refuse_truncation(a in array_strategy(), frac in 0.0f64..1.0) {
        let bytes = save_ndarray(&a);
        prop_assert_eq!(load_ndarray(&bytes).unwrap().to_le_bytes(), a.to_le_bytes());
        let cut = (bytes.len() as f64 * frac) as usize;
        prop_assert!(load_ndarray(&bytes[..cut]).is_err());
    }
}
