//! Running SPIR-V on a Vulkan device through ash: [`gpu`] opens the device (loader,
//! instance, validation, device choice), [`buffer`] owns memory and staging, [`library`]
//! holds the pipelines and records and submits kernel calls.

pub mod buffer;
pub mod gpu;
pub mod library;

pub use gpu::{Gpu, VALIDATION_ENV, open};
pub use library::VulkanLibrary;
