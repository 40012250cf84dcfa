"""PyTorch on n threads, its BLAS included: torch.set_num_threads(n) sets PyTorch's own
threads but not OpenBLAS's, which Debian's torch links (libblas.so.3, libopenblas.so.0)
and which keep every core: at "one thread" a matrix-vector product still ran on two
(137 us against 373 us on one, a [16392,128] f64 gemv). Sets both."""
import ctypes


def set_torch_threads(torch, n):
    torch.set_num_threads(n)
    for name in ("libblas.so.3", "libopenblas.so.0"):
        try:
            ctypes.CDLL(name).openblas_set_num_threads(n)
        except (OSError, AttributeError):  # not there, or not OpenBLAS
            pass
