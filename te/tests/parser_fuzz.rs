//! Property tests: the parser never panics — on random strings, and on random
//! mutations (deleted, duplicated, replaced characters) of real kernels; whatever it
//! accepts, the printer, the verifier and a second parse also handle without panicking,
//! and printing is stable after one round trip.

use std::fs;
use std::path::Path;

use kiln_te::tir::{parse, printer, verify};
use proptest::prelude::*;

fn samples() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    v.sort();
    v
}

fn exercise(text: &str) {
    if let Ok(f) = parse(text) {
        let printed = printer::print(&f);
        let _ = verify(&f);
        match parse(&printed) {
            Ok(g) => assert_eq!(printer::print(&g), printed),
            Err(e) => panic!("printed form does not parse: {e}\n{printed}"),
        }
    }
}

const ALPHABET: &[char] = &[
    '%', '@', '(', ')', '[', ']', '{', '}', ',', ':', '=', '<', '>', '!', '&', '|', '+', '-', '*',
    '/', '.', '0', '1', '9', 'e', 'f', 'i', 'x', ' ', '\n', 'é',
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_strings_never_panic(s in "\\PC{0,200}") {
        exercise(&s);
        exercise(&format!("primfn @k(%a: Buffer[(4), float32, global]) {{ {s} }}"));
    }

    #[test]
    fn mutated_kernels_never_panic(which in 0usize..64, edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, prop::sample::select(ALPHABET)), 1..6)) {
        let all = samples();
        let mut chars: Vec<char> = all[which % all.len()].chars().collect();
        for (at, kind, c) in edits {
            if chars.is_empty() { break; }
            let i = at.index(chars.len());
            match kind {
                0 => { chars.remove(i); }
                1 => chars.insert(i, c),
                _ => chars[i] = c,
            }
        }
        exercise(&chars.into_iter().collect::<String>());
    }
}

#[test]
fn every_sample_round_trips() {
    for s in samples() {
        let f = parse(&s).unwrap();
        let p = printer::print(&f);
        assert_eq!(printer::print(&parse(&p).unwrap()), p);
    }
}
