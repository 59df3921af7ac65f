"""Which functions of ``scipy.special.cython_special`` back the special-function
ops in numba kernels (:mod:`.special` binds and calls them): plain names,
importable without numba or scipy, for the code generator."""

__all__ = ["SPECIAL"]

#: op -> the double-precision function of ``cython_special`` (fused ones by index)
_CYTHON = {
    "erf": "__pyx_fuse_1erf", "erfc": "__pyx_fuse_1erfc", "erfcx": "__pyx_fuse_1erfcx",
    "erfinv": "__pyx_fuse_0erfinv", "erfcinv": "erfcinv", "ndtr": "__pyx_fuse_1ndtr",
    "log_ndtr": "__pyx_fuse_1log_ndtr", "ndtri": "ndtri", "gammaln": "gammaln",
    "loggamma": "__pyx_fuse_1loggamma", "gamma": "__pyx_fuse_1gamma",
    "rgamma": "__pyx_fuse_1rgamma", "psi": "__pyx_fuse_1psi",
    "expit": "__pyx_fuse_0expit", "logit": "__pyx_fuse_0logit",
    "log_expit": "__pyx_fuse_0log_expit", "entr": "entr", "i0": "i0", "i0e": "i0e",
    "i1": "i1", "i1e": "i1e", "j0": "j0", "j1": "j1", "y0": "y0", "y1": "y1",
}
_CYTHON.update({
    "gammasgn": "gammasgn", "k0": "k0", "k1": "k1", "k0e": "k0e", "k1e": "k1e",
    "exp1": "__pyx_fuse_1exp1", "expi": "__pyx_fuse_1expi", "spence": "__pyx_fuse_1spence",
    "dawsn": "__pyx_fuse_1dawsn", "exp10": "exp10", "cosm1": "cosm1", "erfi": "__pyx_fuse_1erfi",
    "ellipk": "ellipk", "ellipe": "ellipe", "ellipkm1": "ellipkm1",
})
_CYTHON2 = {"xlogy": "__pyx_fuse_1xlogy", "xlog1py": "__pyx_fuse_1xlog1py",
            "betaln": "betaln", "rel_entr": "rel_entr", "gammainc": "gammainc",
            "gammaincc": "gammaincc", "beta": "beta", "poch": "poch", "kl_div": "kl_div",
            "jv": "__pyx_fuse_1jv", "yv": "__pyx_fuse_1yv", "iv": "__pyx_fuse_1iv",
            "ive": "__pyx_fuse_1ive", "kv": "__pyx_fuse_1kv", "kve": "__pyx_fuse_1kve",
            "binom": "binom", "boxcox": "boxcox", "boxcox1p": "boxcox1p",
            "huber": "huber", "pseudo_huber": "pseudo_huber", "powm1": "__pyx_fuse_0powm1",
            "stdtr": "__pyx_fuse_0stdtr", "chdtr": "chdtr", "pdtr": "pdtr"}
_CYTHON3 = {"betainc": "__pyx_fuse_0betainc", "gdtr": "gdtr"}
#: integer-order functions: ``double f(long n, double x)``
_ORDER = {"expn": "__pyx_fuse_1expn", "yn": "__pyx_fuse_1yn"}

#: op -> the name of its function in :mod:`.special` (generated source: ``_sp_<op>``)
SPECIAL = {op: op for op in (*_CYTHON, *_CYTHON2, *_CYTHON3, *_ORDER, "zeta")}
