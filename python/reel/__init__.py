"""Reel from Python: tensors, operations, tracing, derivatives and compiled code.

Python code calling reel operations records on Reel's tracer, exactly as C++ code does,
so every transformation of the C++ library applies to Python functions:

    import reel
    def loss(x):
        return reel.sum(reel.sigmoid(x))
    x = reel.tensor([1.0, 2.0, 3.0])
    print(reel.trace(loss, x))          # the tape
    g = reel.grad(loss, x)              # g.value, g.grads[0]   (C++: reel::grad(f, x))
    dx = reel.grad(loss)(x)             # JAX's spelling: a function of x
    fast = reel.simplegrad(loss)        # a cache of compiled gradients
    value, dx = fast(x)

See the README's "Python" section.
"""
import builtins as _builtins
import operator as _operator
from collections import namedtuple as _namedtuple

from . import _reel
from ._reel import *  # noqa: F401,F403  (tensors, operations, tapes, compiled functions)
from ._reel import Error, GuardFailure, Tensor, Tape, CompiledFunction, CompiledGrad, JitFunction, CacheInfo  # noqa: F401

__version__ = "0.1.0"

GradResult = _namedtuple("GradResult", "value grads")
GradResult.__doc__ = "reel.grad(f, *args) and reel.vjp: f's value and one gradient per argument."
HvpResult = _namedtuple("HvpResult", "value grads hvp")
HvpResult.__doc__ = "reel.hvp: f's value, its gradient and the Hessian times v, the last two shaped as the arguments."


class JvpResult:
    """reel.jvp: `.value` (f's result) and `.tangent` (its directional derivative), shaped
    as f's result; `.values` and `.tangents` list every output. Unpacks as
    `value, tangent = reel.jvp(...)`, as JAX's jvp."""

    __slots__ = ("value", "tangent", "values", "tangents")

    def __init__(self, value, tangent, values, tangents):
        self.value, self.tangent, self.values, self.tangents = value, tangent, values, tangents

    def __iter__(self):
        return iter((self.value, self.tangent))

    def __repr__(self):
        return f"JvpResult(value={self.value!r}, tangent={self.tangent!r})"


def _check_argnums(what, argnums):
    """argnums as JAX takes it: an int or a tuple (or list) of ints; a reel.Error otherwise."""
    nums = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    for i in nums:
        if isinstance(i, bool) or not isinstance(i, int):
            raise Error(f"{what}: expected argnums as an int or a tuple of ints, got {type(i).__name__}")


def _pick(what, grads, argnums):
    nums = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    for i in nums:
        if not -len(grads) <= i < len(grads):
            raise Error(f"{what}: expected argnums {argnums!r} to name arguments of the call (0 to {len(grads) - 1}), "
                        f"got {len(grads)} argument{'' if len(grads) == 1 else 's'}")
    if isinstance(argnums, (tuple, list)):
        return tuple(grads[i] for i in argnums)  # noqa: C401
    return grads[argnums]


def grad(f, *args, argnums=0):
    """Gradients of a scalar-valued f, through the interpreter.

    reel.grad(f, *args) (C++'s reel::grad(f, args...)): a GradResult, `.value` and
    `.grads` (one per argument, shaped as it: a tensor, or dicts, lists and tuples of
    them; None for plain arguments).
    reel.grad(f, argnums=0) (JAX's spelling): a function returning the gradient of
    argument `argnums` (an int, or a tuple of them for a tuple of gradients).
    """
    if args:
        value, grads = _reel._grad(f, args)
        return GradResult(value, grads)
    _check_argnums("grad", argnums)

    def grad_f(*a):
        return _pick("grad", _reel._grad(f, a)[1], argnums)

    grad_f.__name__ = f"grad({getattr(f, '__name__', 'f')})"
    return grad_f


def value_and_grad(f, argnums=0):
    """JAX's value_and_grad: a function returning (f(*args), gradient of argument argnums)."""
    _check_argnums("value_and_grad", argnums)

    def value_and_grad_f(*a):
        value, grads = _reel._grad(f, a)
        return value, _pick("value_and_grad", grads, argnums)

    return value_and_grad_f


def gradient(f, *args):
    """Zygote's gradient: the tuple of each argument's gradient."""
    return _reel._grad(f, args)[1]


def withgradient(f, *args):
    """Zygote's withgradient: (value, tuple of each argument's gradient)."""
    return tuple(_reel._grad(f, args))


def vjp(f, seed, *args):
    """C++'s reel::vjp(f, seed, args...): the gradients of sum(seed * f(*args)), for an f with
    a non-scalar result; a GradResult (.value is f's result)."""
    value, grads = _reel._vjp(f, seed, args)
    return GradResult(value, grads)


def jvp(f, primals, tangents):
    """Forward mode: f(*primals) and its directional derivative along `tangents` (one per
    argument tensor, the same structure). A tensor stands for a one-argument tuple. With
    each tangent stacked k times on a new leading axis, all k derivatives in one pass."""
    value, tangent, values, tangents_out = _reel._jvp(f, primals, tangents)
    return JvpResult(value, tangent, values, tangents_out)


def hvp(f, primals, v):
    """Hessian-vector product of a scalar f (forward over reverse): HvpResult(value, grads, hvp)."""
    return HvpResult(*_reel._hvp(f, primals, v))


_OPTIONS = dict(compile_after=2, max_entries=256, max_paths=8, vector_math=True, reuse_memory=True,
                optimization="automatic")


def _options(what, options):
    unknown = [k for k in options if k not in _OPTIONS]
    if unknown:
        raise Error(f"{what}: expected options among {', '.join(_OPTIONS)}, got {', '.join(unknown)}")
    return {**_OPTIONS, **options}


def jit(f=None, **options):
    """A cached function for dynamic programs (C++ reel::jit): jf(*args) returns what f
    returns. Keyed by the tensors' dtypes and shapes and the plain arguments' values
    (ints, floats, bools, strings, None) and types; a Python `if` on a one-element tensor
    is a guard. Options: compile_after (2), max_entries (256), max_paths (8),
    vector_math, reuse_memory, optimization ("automatic", "full" or "quick": C++
    CompileOptions::optimization, docs/codegen.md). Also a decorator: @reel.jit or @reel.jit(compile_after=1).
    A call that misses while another thread traces f runs f uncached instead of waiting
    (that thread may be waiting for it: f calling itself on a thread it joins)."""
    if f is None:
        return lambda g: jit(g, **options)
    return _reel._jit(f, False, **_options("jit", options))


def jit_grad(f=None, **options):
    """The cached value and gradient of a scalar f (C++ reel::jit_grad): g(*args) returns
    (value, gradient of each argument), None for plain arguments."""
    if f is None:
        return lambda g: jit_grad(g, **options)
    return _reel._jit(f, True, **_options("simplegrad", options))


def compile_grad(f, *args):
    """Traces f at these arguments, differentiates and compiles at once (C++
    reel::compile_grad): g(*args) returns (value, gradient of each argument)."""
    return CompiledGrad(f, args)


def simplegrad(f=None, *args, **options):
    """Yota's simplegrad, both C++ meanings: simplegrad(f[, options]) is jit_grad(f);
    simplegrad(f, *args) is compile_grad(f, *args). Also a decorator, as jit_grad."""
    if f is None:
        return lambda g: jit_grad(g, **options)
    if args:
        if options:
            raise Error("simplegrad: options go with simplegrad(f, **options) (a cache), not with example arguments")
        return compile_grad(f, *args)
    return jit_grad(f, **options)


def tree_map(fn, tree, *rest):
    """fn applied to each tensor of `tree` (and the tensors at the same places in `rest`,
    trees of the same structure), the dicts, lists and tuples rebuilt around the results;
    other values kept from `tree`. An SGD step: reel.tree_map(lambda w, g: w - lr * g, model, grads)."""
    if isinstance(tree, Tensor):
        return fn(tree, *rest)
    if isinstance(tree, dict):
        return {k: tree_map(fn, v, *(r[k] for r in rest)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        items = [tree_map(fn, v, *(r[i] for r in rest)) for i, v in enumerate(tree)]
        if isinstance(tree, list):
            return items
        return type(tree)(*items) if hasattr(tree, "_fields") else tuple(items)
    return tree


# Methods and indexing on tensors (each an operation, recorded while tracing).
def _reduction(name):
    op = getattr(_reel, name)

    def method(self, axis=None, keepdims=False):
        return op(self, axis, keepdims)

    method.__name__ = name
    return method


for _name in ("sum", "mean", "prod", "max", "min", "logsumexp"):
    setattr(Tensor, _name, _reduction(_name))
def _method(name):
    # A function of the module is no method (a builtin never receives self): t.exp()
    # calls reel.exp(t).
    op = getattr(_reel, name)

    def method(self):
        return op(self)

    method.__name__ = name
    method.__doc__ = f"reel.{name}(self)"
    return method


for _name in ("exp", "log", "sin", "cos", "tanh", "sigmoid", "sqrt", "square", "abs", "relu"):
    setattr(Tensor, _name, _method(_name))


def _getitem(x, key):
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        raise Error("getitem: an index with ... is not supported; index each axis (ints, slices, an i64 tensor)")
    axis = 0
    for k in key:
        if not isinstance(k, (bool, int, _builtins.slice, Tensor)) and hasattr(type(k), "__index__"):
            try:
                k = _operator.index(k)  # NumPy's integers too
            except TypeError:
                pass  # an array, say: refused below
        if isinstance(k, bool) or not isinstance(k, (int, _builtins.slice, Tensor)):
            raise Error(f"getitem: expected ints, slices or an i64 tensor, got {type(k).__name__}")
        if isinstance(k, int):
            x = _reel.index(x, k, axis)
        elif isinstance(k, _builtins.slice):
            n = x.shape[axis] if axis < x.ndim else 0
            start, stop, step = k.indices(n)
            if step < 0:
                raise Error(f"getitem: a slice's step must be positive, got {step}")
            if step != 1 or start != 0 or stop != n:
                x = _reel.slice(x, axis, start, stop, step)
            axis += 1
        else:
            x = _reel.gather(x, k, axis)
            axis += k.ndim
    return x


Tensor.__getitem__ = _getitem


def _iter(x):
    for i in range(len(x)):
        yield _reel.index(x, i, 0)


Tensor.__iter__ = _iter
del _name
