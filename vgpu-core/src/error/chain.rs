//! An error and its causes as one line, each cause said once.

/// The message of `err` with every one of its causes, as one line (`a: b: c`). This crate's
/// errors never repeat their source in their `Display` (the `error` module's tests check every
/// variant that has one), so each cause is said once. For another crate's error, whose
/// `Display` may repeat its source, see [`foreign_error_chain`].
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// [`error_chain`] for an error of another crate, whose `Display` may already include its
/// source's text (nvml-wrapper's `LibloadingError` is `"a libloading error occurred: {0}"`
/// over the libloading error it holds as its source): a cause whose text the message already
/// has is left out, so that it is said once.
#[cfg(any(feature = "nvml", test))]
pub(crate) fn foreign_error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}
