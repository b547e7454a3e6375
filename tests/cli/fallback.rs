//! The fallback chain over script models (SPEC section 5).
