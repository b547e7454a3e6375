//! The pacer against a store and a fake clock.
