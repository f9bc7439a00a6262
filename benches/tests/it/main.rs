//! The load generator's own tests: one binary, a module per topic.

mod load;
