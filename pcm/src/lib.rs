//! pcm (work in progress).
