//! The text form of the graph IR (placeholder until the printer and parser land).
