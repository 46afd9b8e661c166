"""RFC 9113's rules for the server side of an HTTP/2 connection, as data and pure functions,
which core/proxy/grpc/connection.py applies:

- frame_rules: per frame type, the stream identifier, the lengths, and what it means in each
  stream state (a connection error is answered GOAWAY with the RFC's code, a stream error
  RST_STREAM; late frames on a stream this side reset are ignored, as §5.1 says);
- stream_states: the states of §5.1 and the bounded memory of how closed streams closed;
- request_fields: a request's header fields (§8.2-§8.3): a malformed one is a stream error;
- floods: control frames and unanswered resets counted against useful work (ENHANCE_YOUR_CALM).
"""
