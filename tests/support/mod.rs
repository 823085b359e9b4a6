//! Helpers shared by the integration tests. Each test that needs them says `mod support;`
//! and uses the parts it needs.
#![allow(dead_code)]

pub mod evidence;
