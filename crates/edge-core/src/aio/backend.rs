//! The backend a worker uses, chosen once from `aio.mode`.

use super::file_io::FileIo;
use super::on_loop;
use crate::config::{Aio, AioMode};
use std::fs::File;
use std::io;

/// The backend a worker uses, chosen once.
pub enum FileBackend {
    OnLoop(on_loop::OnLoop),
}

impl FileBackend {
    /// The backend for `aio.mode`. Modes whose backend is not built yet fall back to
    /// reading on the loop, saying so once per process.
    pub fn from_config(aio: &Aio) -> FileBackend {
        if aio.mode != AioMode::Off {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    "aio.mode = {:?}: that backend is not in this build yet; file reads run on the event loop (aio = off)",
                    aio.mode
                )
            });
        }
        FileBackend::OnLoop(on_loop::OnLoop)
    }

    pub fn name(&self) -> &'static str {
        match self {
            FileBackend::OnLoop(_) => "off",
        }
    }

    pub async fn read_exact_append(
        &self,
        file: &File,
        offset: u64,
        len: usize,
        buf: Vec<u8>,
    ) -> (io::Result<()>, Vec<u8>) {
        match self {
            FileBackend::OnLoop(b) => b.read_exact_append(file, offset, len, buf).await,
        }
    }
}
