//! `RULES.md`'s rule tables are generated from the rule definitions: this test
//! regenerates each family's table between its markers and fails when the file is stale;
//! `UPDATE_EXPECT=1` rewrites it in place.

use kiln_rewrite::eqsat::rules;

const BEGIN: &str = "<!-- rules: ";
const END: &str = "<!-- end rules -->";

/// `text` with every marked table regenerated; the families it holds.
fn regenerate(text: &str) -> (String, Vec<String>) {
    let all = rules::all();
    let mut out = String::new();
    let mut families = vec![];
    let mut rest = text;
    while let Some(a) = rest.find(BEGIN) {
        let line_end = a + rest[a..].find('\n').expect("a marker ends its line");
        let family = rest[a + BEGIN.len()..line_end]
            .split_whitespace()
            .next()
            .expect("the marker names a family")
            .to_string();
        let e = rest[line_end..]
            .find(END)
            .expect("every table has an end marker")
            + line_end;
        out.push_str(&rest[..=line_end]);
        out.push_str(&rules::table(&all, &family));
        families.push(family);
        rest = &rest[e..];
    }
    out.push_str(rest);
    (out, families)
}

#[test]
fn rules_md_tables_are_generated_from_the_rules() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/RULES.md");
    let text = std::fs::read_to_string(path).unwrap();
    let (fresh, mut families) = regenerate(&text);
    let mut known: Vec<String> = rules::all()
        .iter()
        .map(|r| r.family().to_string())
        .collect();
    known.dedup();
    families.sort();
    known.sort();
    known.dedup();
    assert_eq!(
        families, known,
        "RULES.md needs one table per built-in family"
    );
    if fresh != text {
        if std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1") {
            std::fs::write(path, &fresh).unwrap();
        } else {
            panic!(
                "RULES.md's rule tables are stale; rerun with UPDATE_EXPECT=1 to regenerate them"
            );
        }
    }
}

#[test]
fn a_table_row_states_the_pattern() {
    let table = rules::table(&rules::all(), "algebraic");
    assert!(
        table.contains("| `neg_neg` (pattern) | `negative(negative(x))` = `x` |  |"),
        "{table}"
    );
    let table = rules::table(&rules::all(), "layout");
    assert!(table.contains("imperative: the new permutation is computed from both"));
}
