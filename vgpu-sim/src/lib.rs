//! A simulated host for `vgpu` tests and demos (under construction).
