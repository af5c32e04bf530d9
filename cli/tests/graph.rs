//! `kiln graph`: the SVG of ResNet-18 parses and has one cluster per kernel (as many as
//! `kiln compile` reports) and one box per op, each inside its cluster; the HTML page
//! draws in headless Chromium without console errors (SKIP without Chromium, a failure
//! under `CI=true`); DOT has one cluster per kernel; unknown formats are refused.

mod common;

use std::path::Path;
use std::process::Command;

use common::{assert_clear_error, kiln, kiln_ok, s, tmp_in};

/// The kernel count `kiln compile` reports: `... (31 kernels)`.
fn compiled_kernels(model: &str, opt_level: &str) -> usize {
    let out = tmp_in(
        "graph",
        &format!("{}-{opt_level}.kmod", model.replace(':', "_")),
    );
    let text = kiln_ok(&[
        "compile",
        model,
        "--target",
        "interp",
        "--opt-level",
        opt_level,
        "-o",
        s(&out),
    ]);
    let tail = text.split(" kernel").next().unwrap();
    let count = tail.rsplit(['(', ' ']).next().unwrap();
    count
        .parse()
        .unwrap_or_else(|_| panic!("no kernel count in {text}"))
}

fn rect(n: roxmltree::Node) -> (f64, f64, f64, f64) {
    let a = |k| n.attribute(k).unwrap().parse::<f64>().unwrap();
    (a("x"), a("y"), a("width"), a("height"))
}

fn has_class(n: &roxmltree::Node, class: &str) -> bool {
    n.attribute("class")
        .is_some_and(|c| c.split_whitespace().any(|x| x == class))
}

fn check_svg(path: &Path, kernels: usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the SVG is well-formed XML");
    let clusters: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("g") && has_class(n, "cluster"))
        .collect();
    assert_eq!(clusters.len(), kernels, "one cluster per kernel");
    let mut ops = 0;
    for c in &clusters {
        let outer = rect(c.children().find(|n| n.has_tag_name("rect")).unwrap());
        let boxes: Vec<_> = c
            .descendants()
            .filter(|n| n.has_tag_name("rect") && has_class(n, "op"))
            .collect();
        assert!(!boxes.is_empty(), "a kernel without ops");
        for b in boxes {
            let (x, y, w, h) = rect(b);
            assert!(
                x >= outer.0
                    && y >= outer.1
                    && x + w <= outer.0 + outer.2
                    && y + h <= outer.1 + outer.3,
                "an op box outside its cluster"
            );
            ops += 1;
        }
    }
    // Every op node has exactly one box.
    let nodes = doc
        .descendants()
        .filter(|n| n.has_tag_name("g") && has_class(n, "node"))
        .count();
    assert_eq!(nodes, ops);
}

#[test]
fn resnet18_svg_has_one_cluster_per_kernel_and_one_box_per_op() {
    for level in ["3", "0"] {
        let kernels = compiled_kernels("zoo:resnet18", level);
        let out = tmp_in("graph", &format!("r18-{level}.svg"));
        let said = kiln_ok(&["graph", "zoo:resnet18", "--opt-level", level, "-o", s(&out)]);
        assert!(said.contains(&format!("{kernels} kernels")), "{said}");
        check_svg(&out, kernels);
    }
}

#[test]
fn resnet18_svg_shows_shapes_and_folds_weights() {
    let out = tmp_in("graph", "r18-labels.svg");
    kiln_ok(&["graph", "zoo:resnet18", "-o", s(&out)]);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("(1, 64, 56, 56) float32"), "edge shapes");
    assert!(text.contains(">data<"), "the input box");
    // conv weights are folded into the convolutions, not drawn as inputs.
    assert!(text.contains("weight "), "folded weights");
}

#[test]
fn profile_colours_every_kernel_and_dot_has_one_cluster_per_kernel() {
    let svg = tmp_in("graph", "mlp-profile.svg");
    kiln_ok(&[
        "graph",
        "zoo:mlp",
        "--profile",
        "--number",
        "2",
        "-o",
        s(&svg),
    ]);
    let text = std::fs::read_to_string(&svg).unwrap();
    let coloured = text.matches("style=\"fill:#").count();
    assert_eq!(coloured, compiled_kernels("zoo:mlp", "3"));
    assert!(text.contains("%, "), "kernel titles carry their share");
    let dot = tmp_in("graph", "mlp.dot");
    kiln_ok(&["graph", "zoo:mlp", "-o", s(&dot)]);
    let text = std::fs::read_to_string(&dot).unwrap();
    assert!(text.starts_with("digraph kiln {"));
    assert_eq!(
        text.matches("subgraph cluster_").count(),
        compiled_kernels("zoo:mlp", "3")
    );
}

#[test]
fn bad_requests_are_one_clear_error() {
    let out = tmp_in("graph", "picture.png");
    assert_clear_error(
        &kiln(&["graph", "zoo:mlp", "-o", s(&out)]),
        &[".svg, .html or .dot"],
    );
    let out = tmp_in("graph", "p.svg");
    assert_clear_error(
        &kiln(&[
            "graph",
            "zoo:mlp",
            "--profile",
            "--target",
            "ref",
            "-o",
            s(&out),
        ]),
        &["ref"],
    );
}

/// Chromium, if installed.
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

#[test]
fn resnet18_page_draws_in_headless_chromium_without_console_errors() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var("CI").is_err(),
            "CI must run the browser test: install Debian's chromium"
        );
        println!("SKIP: no chromium on this machine");
        return;
    };
    let page = tmp_in("graph", "r18.html");
    kiln_ok(&["graph", "zoo:resnet18", "--opt-level", "3", "-o", s(&page)]);
    let profile = tmp_in("graph", "chromium-profile");
    let o = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            &format!("--user-data-dir={}", s(&profile)),
            "--dump-dom",
            &format!("file://{}", s(&page)),
        ])
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&o.stdout);
    let log = String::from_utf8_lossy(&o.stderr);
    let console_errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") && (l.contains("Uncaught") || l.contains("Error")))
        .collect();
    assert!(
        console_errors.is_empty(),
        "console errors: {console_errors:?}"
    );
    // The script ran to its end and wired every op of the picture.
    let ops = dom.matches("class=\"node\"").count();
    assert!(ops > 0, "no ops in the DOM: {}", &dom[..dom.len().min(500)]);
    assert!(
        dom.contains(&format!("data-drawn=\"{ops}\"")),
        "the page's script did not finish wiring {ops} ops"
    );
}
