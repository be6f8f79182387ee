//! Redis locks: see the module files. (Being written.)
