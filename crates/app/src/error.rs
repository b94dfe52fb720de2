//! What goes wrong loading an application file: always with the file and,
//! where there is one, the line.

/// An application file that cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// `file:line: message`.
    #[error("{file}:{line}: {message}")]
    At {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: {message}")]
    File { file: String, message: String },
}
