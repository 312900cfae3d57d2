"""A forking espeak-ng synthesis server (standard library only; run as a script by
``speech.EspeakLibrary``, never imported by the plugin).

It loads libespeak-ng once, initialises it exactly as the ``espeak-ng`` program does for
``-w file`` (synchronous output, then ``SetVoiceByName(voice)``) and then, for every request,
forks a child that sets rate/volume/pitch, speaks the text with the program's flags and returns
the 16-bit samples. libespeak-ng keeps synthesis state in function-level statics (pitch flutter
index, wave phase, echo buffer, ...) that no API call resets, so speaking several utterances in
one process changes the samples; a fresh fork of the initialised process starts every utterance
from the same state a fresh ``espeak-ng`` process has, which makes the samples identical to the
per-turn program, without paying its start-up (exec, library loading, data files, voice) per turn.

Protocol on stdin/stdout, little-endian int32s:
  hello    -> (sample_rate or -1, status of SetVoiceByName)
  request  <- (rate, pitch, volume, n) + n bytes of UTF-8 text
  response -> (status, n) + n bytes of int16 samples; status 0 ok, > 0 an espeak error code,
              -1000 - k the child died of signal k / exited with k.
"""

import ctypes
import os
import struct
import sys

_SYNCHRONOUS, _DONT_EXIT = 2, 0x8000
_RATE, _VOLUME, _PITCH = 1, 2, 3
_POS_CHARACTER = 1
_FLAGS = 0x1100  # espeakCHARS_AUTO | espeakPHONEMES | espeakENDPAUSE: the program's defaults


def _read(f, n):
    buf = b""
    while len(buf) < n:
        part = f.read(n - len(buf))
        if not part:
            return None
        buf += part
    return buf


def main():
    lib_path, voice = sys.argv[1], sys.argv[2]
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        lib = ctypes.CDLL(lib_path)
    except OSError:
        out.write(struct.pack("<ii", -1, -1))
        out.flush()
        return
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                 ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
    chunks = []
    callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                                     ctypes.c_void_p)

    def on_samples(wav, n, _events):
        if wav and n > 0:
            chunks.append(ctypes.string_at(wav, 2 * n))
        return 0

    callback = callback_type(on_samples)
    rate = lib.espeak_Initialize(_SYNCHRONOUS, 0, None, _DONT_EXIT)
    lib.espeak_SetSynthCallback(callback)
    status = lib.espeak_SetVoiceByName(voice.encode("utf-8")) if rate > 0 else -1
    out.write(struct.pack("<ii", rate, status))
    out.flush()
    if rate <= 0 or status != 0:
        return
    while True:
        head = _read(inp, 16)
        if head is None:
            return
        speed, pitch, volume, n = struct.unpack("<iiii", head)
        text = _read(inp, n)
        if text is None:
            return
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: one utterance from the freshly initialised state
            os.close(r)
            code = 0
            try:
                lib.espeak_SetParameter(_RATE, speed, 0)
                lib.espeak_SetParameter(_VOLUME, volume, 0)
                lib.espeak_SetParameter(_PITCH, pitch, 0)
                code = lib.espeak_Synth(text, len(text) + 1, 0, _POS_CHARACTER, 0, _FLAGS,
                                        None, None)
                code = code or lib.espeak_Synchronize()
                data = b"".join(chunks)
                with os.fdopen(w, "wb") as f:
                    f.write(struct.pack("<ii", code, len(data)))
                    f.write(data)
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            reply = f.read()
        _, wstatus = os.waitpid(pid, 0)
        if len(reply) < 8 or len(reply) != 8 + struct.unpack("<ii", reply[:8])[1]:
            k = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else os.WEXITSTATUS(wstatus)
            reply = struct.pack("<ii", -1000 - k, 0)
        out.write(reply)
        out.flush()


if __name__ == "__main__":
    main()
