"""scipy.special in CUDA kernels: the CUDA math API where it has the function
(``erf``, ``erfinv``, ``lgamma``, ``normcdf``, ``cyl_bessel_i0``, ``j0``, ...;
host builds of the same source, which the tests run, use C++17's
``std::cyl_bessel_i`` for the two device-only Bessel functions),
device helpers below where it does not (digamma, Hurwitz zeta, the scaled
Bessel functions, ``log_ndtr``, the logistic family, ``xlogy``, the Huber
losses), and in
:mod:`.special_bessel` (Bessel functions of real order, ``k0``...``k1e``,
``yn``) and :mod:`.special_integrals` (incomplete gamma and beta functions,
``beta``, ``poch``, ``gammasgn``, exponential integrals, ``spence``,
``dawsn``, ``kl_div``).  The helpers
follow scipy's definitions at the edges (``xlogy(0, y) = 0``, ``entr(0) = 0``,
``loggamma`` of a negative real is NaN) and are ``__host__ __device__``
templates like the rest of :data:`.source.PREAMBLE`.
"""

from __future__ import annotations

from .special_bessel import BESSEL_FUNCS, BESSEL_PREAMBLE
from .special_integrals import INTEGRALS_FUNCS, INTEGRALS_PREAMBLE

__all__ = ["SPECIAL_FUNCS", "SPECIAL_PREAMBLE"]

#: op of :mod:`hybridad.ops.special` -> its CUDA function
SPECIAL_FUNCS = {
    "erf": "erf", "erfc": "erfc", "erfcx": "erfcx", "erfinv": "erfinv", "erfcinv": "erfcinv",
    "ndtr": "normcdf", "ndtri": "normcdfinv", "log_ndtr": "hd_log_ndtr",
    "gammaln": "lgamma", "loggamma": "hd_loggamma", "gamma": "tgamma", "rgamma": "hd_rgamma",
    "psi": "hd_digamma", "zeta": "hd_zeta", "betaln": "hd_betaln",
    "expit": "hd_expit", "logit": "hd_logit", "log_expit": "hd_log_expit",
    "xlogy": "hd_xlogy", "xlog1py": "hd_xlog1py", "entr": "hd_entr", "rel_entr": "hd_rel_entr",
    "i0": "hd_i0", "i1": "hd_i1", "i0e": "hd_i0e", "i1e": "hd_i1e",
    "j0": "j0", "j1": "j1", "y0": "y0", "y1": "y1",
    "huber": "hd_huber", "pseudo_huber": "hd_pseudo_huber", "exp10": "hd_exp10",
    "cosm1": "hd_cosm1", "powm1": "hd_powm1",
    **BESSEL_FUNCS, **INTEGRALS_FUNCS,
}

SPECIAL_PREAMBLE = r"""
#ifdef __CUDA_ARCH__
HD double hd_bessel_i0(double x) { return cyl_bessel_i0(x); }
HD double hd_bessel_i1(double x) { return cyl_bessel_i1(x); }
#else  // host builds (the tests run kernels on the CPU): C++17's special functions
HD double hd_bessel_i0(double x) { return std::cyl_bessel_i(0.0, fabs(x)); }
HD double hd_bessel_i1(double x) {
  double v = std::cyl_bessel_i(1.0, fabs(x)); return x < 0.0 ? -v : v; }
#endif
template <typename T> HD T hd_i0(T x) { return T(hd_bessel_i0(double(x))); }
template <typename T> HD T hd_i1(T x) { return T(hd_bessel_i1(double(x))); }
template <typename T> HD T hd_expit(T x) { return T(1) / (T(1) + exp(-x)); }
template <typename T> HD T hd_logit(T x) { return log(x / (T(1) - x)); }
template <typename T> HD T hd_log_expit(T x) {
  return x < T(0) ? x - log1p(exp(x)) : -log1p(exp(-x)); }
template <typename T> HD T hd_xlogy(T x, T y) {
  return (x == T(0) && !isnan(y)) ? T(0) : x * log(y); }
template <typename T> HD T hd_xlog1py(T x, T y) {
  return (x == T(0) && !isnan(y)) ? T(0) : x * log1p(y); }
template <typename T> HD T hd_entr(T x) {
  return isnan(x) ? x : (x > T(0) ? -x * log(x) : (x == T(0) ? T(0) : -INFINITY)); }
template <typename T> HD T hd_rel_entr(T x, T y) {
  if (isnan(x) || isnan(y)) return x + y;
  if (x > T(0) && y > T(0)) return x * log(x / y);
  return (x == T(0) && y >= T(0)) ? T(0) : T(INFINITY); }
template <typename T> HD T hd_huber(T d_, T r_) {  // in double, as scipy's float32 loop
  double d = double(d_), r = double(r_);
  if (d < 0.0) return T(INFINITY);
  return T(fabs(r) <= d ? 0.5 * r * r : d * (fabs(r) - 0.5 * d)); }
template <typename T> HD T hd_pseudo_huber(T d_, T r_) {  // scipy's d^2 expm1(log1p(v^2) / 2)
  double d = double(d_), r = double(r_);
  if (d < 0.0) return T(INFINITY);
  if (d == 0.0 || r == 0.0) return T(0);
  double v = r / d;
  return T(d * d * expm1(0.5 * log1p(v * v))); }
template <typename T> HD T hd_exp10(T x) { return T(pow(10.0, double(x))); }
template <typename T> HD T hd_cosm1(T x) {  // cos x - 1 = -2 sin^2(x / 2), no cancellation
  double s = sin(0.5 * double(x));
  return T(-2.0 * s * s); }
template <typename T> HD T hd_powm1(T x_, T y_) {  // x^y - 1, by expm1 where y log x is small
  double x = double(x_), y = double(y_);
  if (y == 0.0 || x == 1.0) return T(0);
  if (x > 0.0) {
    double l = y * log(x);
    if (fabs(l) < 0.5) return T(expm1(l));
  }
  return T(pow(x, y) - 1.0); }
template <typename T> HD T hd_log_ndtr(T x) {  // log(erfc(-x / sqrt 2) / 2), no underflow
  T t = x * T(0.7071067811865476);
  return x > T(0) ? log1p(-T(0.5) * erfc(t)) : log(T(0.5) * erfcx(-t)) - t * t; }
template <typename T> HD T hd_loggamma(T x) { return x < T(0) ? T(NAN) : lgamma(x); }
template <typename T> HD T hd_rgamma(T x) {
  return (x <= T(0) && x == floor(x)) ? T(0) : T(1) / tgamma(x); }
template <typename T> HD T hd_betaln(T a, T b) { return lgamma(a) + lgamma(b) - lgamma(a + b); }
template <typename T> HD T hd_digamma(T x) {  // reflection, recurrence, asymptotic series
  double v = double(x), r = 0.0;
  if (v <= 0.0) {
    if (v == floor(v)) return T(v == 0.0 ? -INFINITY : NAN);
    r = -3.141592653589793 / tan(3.141592653589793 * v);
    v = 1.0 - v;
  }
  while (v < 6.0) { r -= 1.0 / v; v += 1.0; }
  double w = 1.0 / (v * v);
  double s = w * (1.0 / 12 - w * (1.0 / 120 - w * (1.0 / 252 - w * (1.0 / 240
             - w * (1.0 / 132 - w * (691.0 / 32760 - w / 12))))));
  return T(r + log(v) - 0.5 / v - s); }
template <typename T> HD T hd_zeta(T s_, T q_) {  // Hurwitz zeta, Euler-Maclaurin (Cephes)
  const double A[12] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0,
    -1.8924375803183791606e9, 7.47242496e10, -2.950130727918164224e12,
    1.1646782814350067249e14, -4.5979787224074726105e15, 1.8152105401943546773e17,
    -7.1661652561756670113e18};
  double s = double(s_), q = double(q_);
  if (s == 1.0) return T(INFINITY);
  if (s < 1.0) return T(NAN);
  if (q <= 0.0) {
    if (q == floor(q)) return T(INFINITY);
    if (s != floor(s)) return T(NAN);
  }
  if (q > 1e8) return T((1.0 / (s - 1.0) + 1.0 / (2.0 * q)) * pow(q, 1.0 - s));  // DLMF 25.11.43
  double total = pow(q, -s), a = q, b = 0.0;
  int i = 0;
  while (i < 9 || a <= 9.0) {
    i += 1; a += 1.0; b = pow(a, -s); total += b;
    if (fabs(b / total) < 1.11022302462515654042e-16) return T(total);
  }
  double w = a, fact = 1.0, k = 0.0;
  total += b * w / (s - 1.0) - 0.5 * b;
  for (int j = 0; j < 12; ++j) {
    fact *= s + k; b /= w;
    double t = fact * b / A[j];
    total += t;
    if (fabs(t / total) < 1.11022302462515654042e-16) break;
    k += 1.0; fact *= s + k; b /= w; k += 1.0;
  }
  return T(total); }
HD double hd_bessel_scaled_tail(double x, double mu) {  // I_nu(x) e^-x, large x > 0
  double term = 1.0, total = 1.0;
  for (int k = 1; k < 12; ++k) {
    double odd = 2.0 * k - 1.0;
    term *= -(mu - odd * odd) / (8.0 * k * x);
    total += term;
  }
  return total / sqrt(2.0 * 3.141592653589793 * x); }
template <typename T> HD T hd_i0e(T x_) {
  double x = fabs(double(x_));
  return T(x < 700.0 ? hd_bessel_i0(x) * exp(-x) : hd_bessel_scaled_tail(x, 0.0)); }
template <typename T> HD T hd_i1e(T x_) {
  double x = fabs(double(x_));
  double v = x < 700.0 ? hd_bessel_i1(x) * exp(-x) : hd_bessel_scaled_tail(x, 4.0);
  return T(x_ < T(0) ? -v : v); }
""" + BESSEL_PREAMBLE + INTEGRALS_PREAMBLE
