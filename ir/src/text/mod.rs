//! The text form of the graph IR, in the style of TVM Relay's `astext`: a printer
//! ([`print_module`], also `Display for Module`) and a parser ([`parse_module`],
//! [`parse_module_with`] for custom ops) that reads back what the printer writes, so
//! `print(parse(print(m))) == print(m)`.
//!
//! ```
//! use kiln_ir::text::{PrintOptions, parse_module, print_module};
//!
//! let text = "def @main(%x: Tensor[(2, 2), float32]) -> (Tensor[(2, 2), float32],) {\n  (%x,)\n}\n";
//! let m = parse_module(text).unwrap();
//! let printed = print_module(&m, &PrintOptions::default());
//! assert_eq!(printed, format!("#[version = \"0.0.5\"]\n{text}"));
//! ```
//!
//! Text printed without metadata (`show_meta_data: false`) names non-scalar constants
//! `meta[relay.Constant][K]` without their values and does not parse back.

mod lexer;
mod parser;
mod printer;
#[cfg(test)]
mod tests;

pub use parser::{MAX_NESTING, parse_module, parse_module_with};
pub use printer::{PrintOptions, binding_names, module_binding_names, print_module};

impl std::str::FromStr for crate::expr::Module {
    type Err = crate::error::Error;

    /// Parses the text form with the built-in ops (see [`parse_module`]).
    fn from_str(text: &str) -> crate::error::Result<Self> {
        parse_module(text)
    }
}
