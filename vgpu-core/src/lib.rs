//! vgpu-core (under construction).
