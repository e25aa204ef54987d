"""cupipe.stream_copy equals x.clone() bit for bit, for any dtype, size, offset and layout, and
under every mechanism / stages / vec_bytes setting."""
from __future__ import annotations

import pytest
import torch

import cupipe
from conftest import HAS_CUDA, make_input, poison_allocator, tma_supported

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64]
SIZES = [0, 1, 2, 3, 7, 13, 1023, 100003]
MECHANISMS = list(cupipe.MECHANISMS)
STAGES = [1, 2, 3, 4, 8]
VEC_BYTES = [0, 4, 8, 16]


def random_bits(n: int, dtype: torch.dtype, device="cpu", seed: int = 0) -> torch.Tensor:
    """n values of ``dtype`` made of random bytes (NaNs with payloads, denormals, -0 included),
    so that only a true byte copy reproduces them. bool gets valid 0/1 values."""
    if dtype == torch.bool:
        return make_input((n,), torch.bool, device, seed)
    itemsize = torch.empty((), dtype=dtype).element_size()
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (n * itemsize,), generator=g, dtype=torch.uint8)
    return raw.view(dtype).to(device)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a contiguous tensor (0-d and empty included)."""
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


def assert_bit_identical(y: torch.Tensor, x: torch.Tensor, what: str = ""):
    assert y.shape == x.shape, f"{what}: shape {y.shape} != {x.shape}"
    assert y.dtype == x.dtype, f"{what}: dtype {y.dtype} != {x.dtype}"
    assert y.device == x.device, f"{what}: device {y.device} != {x.device}"
    assert y.is_contiguous(), f"{what}: result is not contiguous (strides {y.stride()})"
    ref = x.clone(memory_format=torch.contiguous_format)
    yb, rb = as_bytes(y), as_bytes(ref)
    if not torch.equal(yb, rb):
        bad = (yb != rb).nonzero().flatten()
        first = int(bad[0])
        raise AssertionError(
            f"{what}: {bad.numel()} of {yb.numel()} bytes differ; first at byte {first} "
            f"(element {first // max(x.element_size(), 1)}): got 0x{int(yb[first]):02x}, "
            f"expected 0x{int(rb[first]):02x}")
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        assert torch.equal(y, ref), what


def _copy(x, **kw):
    if x.is_cuda:
        poison_allocator(max(x.numel() * x.element_size(), 1) * 2, x.device)
    y = cupipe.stream_copy(x, **kw)
    assert y.data_ptr() != x.data_ptr() or x.numel() == 0, "stream_copy returned an alias"
    return y


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_stream_copy_dtypes_sizes(device, dtype, n):
    x = random_bits(n, dtype, device, seed=n)
    y = _copy(x)
    assert_bit_identical(y, x, f"{dtype} n={n}")
    assert_bit_identical(torch.ops.cupipe.stream_copy(x), x, "op entry point")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int8, torch.float64,
                                   torch.complex64], ids=lambda d: str(d).replace("torch.", ""))
def test_stream_copy_storage_offsets(device, dtype):
    """x = base[k:k+n] for offsets 0..15 elements: every misalignment of src vs a fresh dst."""
    base = random_bits(4096 + 64, dtype, device, seed=3)
    for k in range(16):
        for n in (1, 3, 17, 255, 1000, 4096):
            x = base[k:k + n]
            assert x.storage_offset() == k
            assert_bit_identical(_copy(x), x, f"{dtype} offset={k} n={n}")


def test_stream_copy_shapes(device):
    for shape in [(), (1,), (3, 5), (2, 3, 4), (1, 1, 1, 7), (5, 0, 3), (0,)]:
        x = random_bits(int(torch.Size(shape).numel()), torch.float32, device, 7).reshape(shape)
        assert_bit_identical(_copy(x), x, f"shape {shape}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool,
                                   torch.complex64], ids=lambda d: str(d).replace("torch.", ""))
def test_stream_copy_noncontiguous(device, dtype):
    b2 = random_bits(37 * 41, dtype, device, 11).view(37, 41)
    b3 = random_bits(6 * 7 * 9, dtype, device, 12).view(6, 7, 9)
    flat = random_bits(3000, dtype, device, 13)
    cases = [
        ("transposed", b2.t()),
        ("step-slice", b2[:, ::3]),
        ("row-step", b2[::2]),
        ("offset-slice", b2[3:30:4, 5:]),
        ("permuted", b3.permute(2, 0, 1)),
        ("expanded", b2[:1].expand(9, 41)),
        ("strided-1d", flat[5::7]),
        ("offset-view-t", flat[9:9 + 40 * 50].view(40, 50).t()),
        ("channels-last", random_bits(2 * 3 * 5 * 4, dtype, device, 14).view(2, 3, 5, 4)
         .contiguous(memory_format=torch.channels_last)),
    ]
    for name, x in cases:
        assert_bit_identical(_copy(x), x, f"{dtype} {name}")
    if dtype == torch.complex64:  # lazy conjugate view: the copy holds the conjugated values
        xc = b2.conj()
        y = _copy(xc)
        assert torch.equal(as_bytes(y.resolve_conj()), as_bytes(xc.resolve_conj()))


def test_stream_copy_is_a_copy(device):
    x = make_input((100,), torch.float32, device, seed=15)
    y = cupipe.stream_copy(x)
    y.zero_()
    assert not bool((x == 0).all()), "writing the result changed the input"
    assert cupipe.stream_copy(x).data_ptr() != x.data_ptr()


def test_stream_copy_autograd(device):
    x = make_input((5, 6), torch.float64, device, seed=16).requires_grad_()
    y = cupipe.stream_copy(x.t())
    g = make_input(y.shape, torch.float64, device, seed=17)
    gx, = torch.autograd.grad(y, x, g)
    assert torch.equal(gx, g.t())
    assert torch.autograd.gradcheck(lambda t: cupipe.stream_copy(t, mechanism="sync", stages=2),
                                    (x,))


def _expect_ok(device, mechanism):
    if device != "cuda" or mechanism != "tma":
        return True
    return tma_supported()


@pytest.mark.parametrize("vec_bytes", VEC_BYTES)
@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_stream_copy_mechanisms(device, mechanism, stages, vec_bytes):
    """Every knob combination is accepted (CPU validates and ignores them) and exact; on CUDA
    'tma' needs sm_90+ and otherwise raises ValueError naming the mechanism."""
    kw = dict(mechanism=mechanism, stages=stages, vec_bytes=vec_bytes)
    base = random_bits(70000, torch.uint8, device, seed=stages * 100 + vec_bytes)
    xs = [base[:0], base[:1], base[3:3 + 13], base[1:1 + 1023], base[5:5 + 65537],
          random_bits(4099, torch.float32, device, 18)[1:],
          random_bits(3001, torch.float64, device, 19)]
    if not _expect_ok(device, mechanism):
        with pytest.raises(ValueError, match="tma"):
            cupipe.stream_copy(xs[3], **kw)
        assert_bit_identical(_copy(xs[3]), xs[3], "after the error")
        return
    for x in xs:
        assert_bit_identical(_copy(x, **kw), x, f"{kw} n={x.numel()} off={x.storage_offset()}")


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_stream_copy_large(device, mechanism):
    if not _expect_ok(device, mechanism):
        pytest.skip("tma needs sm_90")
    n = (1 << 26) + 7
    x = random_bits(n, torch.float32, device, 20)
    assert_bit_identical(_copy(x[3:], mechanism=mechanism), x[3:], f"large {mechanism}")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and a CUDA build of cupipe")
def test_stream_copy_poisoned_output_fully_written():
    """The output comes from a poisoned (0xFF) allocator block; every byte must be written."""
    for n in (1, 13, 1023, 100003, 1 << 20):
        x = torch.zeros(n, dtype=torch.uint8, device="cuda")
        for mech in MECHANISMS:
            if not _expect_ok("cuda", mech):
                continue
            poison_allocator(n, "cuda")
            y = cupipe.stream_copy(x, mechanism=mech)
            torch.cuda.synchronize()
            assert int(y.max()) == 0, f"{mech} n={n}: unwritten bytes in the output"
