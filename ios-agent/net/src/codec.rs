//! The agent-message codec for libp2p request-response on
//! [`PROTOCOL_NAME`](ios_agent_core::message::PROTOCOL_NAME).
//!
//! A request is one CBOR-encoded [`Message`], written whole and followed by the end of the
//! stream; the reply is a small CBOR [`Ack`]. The reader refuses frames longer than
//! [`MAX_MESSAGE_LEN`] before decoding and calls [`Message::validate`] after, and never fails
//! the stream for bad content: it yields `Request::Bad`, so the network reports the sender
//! and goes on serving.

use std::io;

use ios_agent_core::message::MAX_MESSAGE_LEN;
use ios_agent_core::Message;
use libp2p::futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::StreamProtocol;
use serde::{Deserialize, Serialize};

/// Largest [`Ack`] read, in bytes.
const MAX_ACK_LEN: usize = 4096;

/// A request on the agent protocol.
#[derive(Debug, Clone)]
pub(crate) enum Request {
    /// A valid agent message.
    Message(Message),
    /// Bytes sent as they are (a test hook to exercise peers' handling of hostile input).
    Raw(Vec<u8>),
    /// What the reader got when the frame was too long, undecodable or invalid.
    Bad(String),
}

/// The receiver's answer to one message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ack {
    /// Decoded and valid: handed to the receiving agent.
    Accepted,
    /// Refused, with the reason.
    Rejected(String),
}

/// The codec (stateless).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AgentCodec;

/// Reads at most `limit` bytes up to the end of the stream; `None` if there were more.
async fn read_limited<T: AsyncRead + Unpin + Send>(
    io: &mut T,
    limit: usize,
) -> io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    io.take(limit as u64 + 1).read_to_end(&mut buf).await?;
    Ok((buf.len() <= limit).then_some(buf))
}

/// Decodes and checks one frame.
pub(crate) fn decode_frame(bytes: &[u8]) -> Request {
    if bytes.len() > MAX_MESSAGE_LEN {
        return Request::Bad(format!(
            "frame of {} bytes refused (limit {MAX_MESSAGE_LEN})",
            bytes.len()
        ));
    }
    match ciborium::from_reader::<Message, _>(bytes) {
        Err(e) => Request::Bad(format!("undecodable message of {} bytes: {e}", bytes.len())),
        Ok(m) => match m.validate() {
            Ok(()) => Request::Message(m),
            Err(e) => Request::Bad(format!("invalid {} message: {e}", m.kind())),
        },
    }
}

/// Encodes a message, refusing one above the limit (the peer would refuse it anyway).
pub(crate) fn encode_message(m: &Message) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    ciborium::into_writer(m, &mut out)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    if out.len() > MAX_MESSAGE_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} message of {} bytes exceeds the limit {MAX_MESSAGE_LEN}",
                m.kind(),
                out.len()
            ),
        ));
    }
    Ok(out)
}

impl libp2p::request_response::Codec for AgentCodec {
    type Protocol = StreamProtocol;
    type Request = Request;
    type Response = Ack;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Request>
    where
        T: AsyncRead + Unpin + Send,
    {
        Ok(match read_limited(io, MAX_MESSAGE_LEN).await? {
            None => Request::Bad(format!(
                "frame of more than {MAX_MESSAGE_LEN} bytes refused before decoding"
            )),
            Some(bytes) => decode_frame(&bytes),
        })
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Ack>
    where
        T: AsyncRead + Unpin + Send,
    {
        let bytes = read_limited(io, MAX_ACK_LEN).await?.ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "acknowledgement too long")
        })?;
        ciborium::from_reader(bytes.as_slice())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Request,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        let bytes = match req {
            Request::Message(m) => encode_message(&m)?,
            Request::Raw(b) => b,
            Request::Bad(reason) => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, reason))
            }
        };
        io.write_all(&bytes).await
    }

    async fn write_response<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        ack: Ack,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        let mut out = Vec::new();
        let mut ack = ack;
        if let Ack::Rejected(reason) = &mut ack {
            // Keep the reply under the reader's limit whatever the reason says.
            if reason.len() > 1024 {
                let mut cut = 1024;
                while !reason.is_char_boundary(cut) {
                    cut -= 1;
                }
                reason.truncate(cut);
            }
        }
        ciborium::into_writer(&ack, &mut out)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        io.write_all(&out).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ios_agent_core::MessageId;

    #[test]
    fn frames_are_checked_before_and_after_decoding() {
        let m = Message::StealExhausted { id: MessageId(9) };
        let bytes = encode_message(&m).expect("encodes");
        assert!(matches!(decode_frame(&bytes), Request::Message(x) if x == m));
        assert!(
            matches!(decode_frame(b"\xff\x00garbage"), Request::Bad(r) if r.contains("undecodable"))
        );
        let big = vec![0u8; MAX_MESSAGE_LEN + 1];
        assert!(matches!(decode_frame(&big), Request::Bad(r) if r.contains("refused")));
    }
}
