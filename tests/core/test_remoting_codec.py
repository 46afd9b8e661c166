import json
import struct

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.remoting.codes import SerializeType
from core.remoting.command import (
    FrameDecoder,
    FrameError,
    HeaderError,
    RemotingCommand,
    encode_frame,
)

i32 = st.integers(-(2**31), 2**31 - 1)
texts = st.text(max_size=30)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    ext_fields=st.dictionaries(texts, texts, max_size=6),
    body=st.binary(max_size=200),
    opaque=i32,
    flag=st.integers(0, 3),
    remark=st.none() | texts.filter(bool),
    language=st.sampled_from(["JAVA", "CPP", "PYTHON", "GO"]),
    version=st.integers(0, 2**15 - 1),
    serialize_type=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]),
)


@given(st.lists(commands, max_size=5), st.integers(1, 50))
def test_frames_round_trip_however_the_stream_is_cut(cmds, chunk):
    stream = b"".join(encode_frame(c) for c in cmds)
    decoder = FrameDecoder()
    out = []
    for i in range(0, len(stream), chunk):
        out.extend(decoder.feed(stream[i:i + chunk]))
    assert out == cmds
    assert decoder.buffered == 0


def test_json_header_shape_matches_the_java_broker():
    cmd = RemotingCommand(code=0, ext_fields={"queueId": "1", "msgId": "X"}, opaque=5, flag=1, language="JAVA")
    frame = encode_frame(cmd)
    length, word = struct.unpack_from(">ii", frame)
    assert word >> 24 == 0 and length == len(frame) - 4
    header = frame[8:8 + (word & 0xFFFFFF)]
    assert header == (b'{"code":0,"extFields":{"msgId":"X","queueId":"1"},"flag":1,"language":"JAVA",'
                      b'"opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}')


def test_cpp_client_header_with_numbers_and_a_newline_is_read():
    header = json.dumps({"code": 10, "language": "CPP", "version": 63, "opaque": 7, "flag": 0, "remark": "",
                         "extFields": {"queueId": 3, "sysFlag": 0, "batch": "1", "topic": "T", "unitMode": False,
                                       "x": None}}, separators=(",", ":")).encode() + b"\n"
    frame = struct.pack(">ii", 4 + len(header) + 2, len(header)) + header + b"hi"
    (cmd,) = FrameDecoder().feed(frame)
    assert cmd.ext_fields == {"queueId": "3", "sysFlag": "0", "batch": "1", "topic": "T", "unitMode": "false"}
    assert (cmd.code, cmd.opaque, cmd.language, cmd.version, cmd.remark, cmd.body) == (10, 7, "CPP", 63, None, b"hi")


def test_replies_keep_the_request_serialize_type_and_string_values():
    req = RemotingCommand(code=11, opaque=9, serialize_type=SerializeType.ROCKETMQ)
    resp = req.reply(0, ext_fields={"nextBeginOffset": "5"})
    assert resp.serialize_type == SerializeType.ROCKETMQ and resp.opaque == 9 and resp.is_response
    (back,) = FrameDecoder().feed(encode_frame(resp))
    assert back.ext_fields == {"nextBeginOffset": "5"}


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 3),  # shorter than a header word
    struct.pack(">i", 17 * 1024 * 1024) + b"x" * 10,  # over the frame limit
    struct.pack(">ii", 10, 50) + b"x" * 6,  # header longer than the frame
])
def test_unframeable_streams_raise(frame):
    with pytest.raises(FrameError):
        FrameDecoder(16 * 1024 * 1024).feed(frame)


def test_bad_headers_keep_the_stream_in_step():
    good = encode_frame(RemotingCommand(code=1, opaque=2))
    bad_json = b"{not json"
    typed = orjson.dumps({"code": "x", "opaque": 44})
    stream = (struct.pack(">ii", 4 + len(bad_json), len(bad_json)) + bad_json
              + struct.pack(">ii", 4 + len(typed), len(typed)) + typed + good)
    first, second, third = FrameDecoder().feed(stream)
    assert isinstance(first, HeaderError) and first.opaque is None
    assert isinstance(second, HeaderError) and second.opaque == 44
    assert isinstance(third, RemotingCommand) and third.opaque == 2


def test_unknown_serialize_type_is_a_header_error():
    header = b"{}"
    frame = struct.pack(">ii", 4 + len(header), (7 << 24) | len(header)) + header
    (item,) = FrameDecoder().feed(frame)
    assert isinstance(item, HeaderError)
