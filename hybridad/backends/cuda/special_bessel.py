"""Bessel functions of real order in CUDA kernels (the CUDA math API has only
``j0``, ``j1``, ``y0``, ``y1``, ``jn``, ``yn`` and ``cyl_bessel_i0``/``i1``).

For ``nu >= 0`` and ``x > 0``, :data:`BESSEL_PREAMBLE` follows the classical
scheme of Temme (1975, 1976) with Steed's continued fractions (Barnett et al.,
1974):

* the ratio ``J'_nu / J_nu`` (``I'_nu / I_nu``) from its continued fraction
  (modified Lentz), carried down by the recurrence to an order ``mu`` with
  ``|mu| <= 1/2``;
* for ``x < 2``, Temme's power series for ``Y_mu, Y_mu+1`` (``K_mu, K_mu+1``),
  whose gamma-function coefficients come from the Taylor series of ``1/Gamma``
  (no cancellation near ``mu = 0``); for ``x >= 2``, Steed's complex continued
  fraction for ``(J' + iY') / (J + iY)`` and Temme's for ``K``;
* the Wronskian then fixes ``J_mu`` (``I_mu``); ``Y`` and ``K`` go up by the
  recurrence, ``J`` and ``I`` are the ratios scaled by it.  ``K`` is computed
  scaled by ``exp(x)`` where ``x >= 2``, so ``kve`` and ``ive`` do not
  overflow.

Large ``x`` uses Hankel's asymptotic expansions (``J``, ``Y``: ``x >= 20``
and ``x >= nu**2 / 10``; ``I``, ``K``: ``x > 1000`` and ``x > nu**2``).  The
relative error is about 1e-14, growing to about 1e-10 for ``J``, ``Y`` of
large order at ``x`` in the thousands (``nu**2 > 10 x``), where the continued
fraction takes ``x`` steps.  Negative orders follow from the reflection formulas, negative
``x`` (integer orders only, as scipy) from the parity of ``J_n`` and ``I_n``;
the edges (``x = 0``, infinities, NaN) are scipy's.  Everything is computed in
double precision; float32 operands are rounded afterwards, as scipy does.
"""

from __future__ import annotations

__all__ = ["BESSEL_FUNCS", "BESSEL_PREAMBLE"]

#: op of :mod:`hybridad.ops.special` -> its CUDA function (templates of this preamble)
BESSEL_FUNCS = {
    "jv": "hd_jv", "yv": "hd_yv", "iv": "hd_iv", "ive": "hd_ive", "kv": "hd_kv",
    "kve": "hd_kve", "yn": "hd_yn", "k0": "hd_k0", "k1": "hd_k1", "k0e": "hd_k0e",
    "k1e": "hd_k1e",
}

BESSEL_PREAMBLE = r"""
#define HDX static __host__ __device__ __noinline__
#define HD_PI 3.141592653589793
HD double hd_sinpi(double x) {  // sin(pi x), exactly 0 at the integers
  if (x == floor(x)) return 0.0 * x;
  double r = x - 2.0 * rint(0.5 * x);  // [-1, 1]
  double a = fabs(r);
  if (a > 0.5) a = 1.0 - a;
  double s = a <= 0.25 ? sin(HD_PI * a) : cos(HD_PI * (0.5 - a));
  return r < 0.0 ? -s : s; }
HD double hd_cospi(double x) {  // cos(pi x), exactly 0 at the half-integers
  double a = fabs(x - 2.0 * rint(0.5 * x));  // [0, 1]
  if (a == 0.5) return 0.0;
  if (a <= 0.25) return cos(HD_PI * a);
  if (a <= 0.75) return sin(HD_PI * (0.5 - a));
  return -cos(HD_PI * (1.0 - a)); }
// 1/Gamma(z) = sum_k c_k z^k (c_1 = 1): se = c_2 + c_4 m^2 + ..., so = c_3 m^2 + c_5 m^4 + ...
// (|m| <= 1; the terms left out are below 3e-18)
HD void hd_rgamma_taylor(double m, double* se, double* so) {
  const double ce[13] = {0.57721566490153286061, -0.042002635034095235529,
    -0.042197734555544336748, 0.0072189432466630995424, -0.00021524167411495097282,
    -0.000020134854780788238656, 1.1330272319816958824e-6, 6.1160951044814158179e-9,
    -1.1812745704870201446e-9, 7.782263439905071254e-12, 5.100370287454475979e-13,
    -5.3481225394230179824e-15, -1.1812593016974587695e-16};
  const double co[12] = {-0.65587807152025388108, 0.1665386113822914895,
    -0.0096219715278769735621, -0.0011651675918590651121, 0.00012805028238811618615,
    -1.2504934821426706573e-6, -2.0563384169776071035e-7, 5.0020076444692229301e-9,
    1.0434267116911005105e-10, -3.6968056186422057082e-12, -2.0583260535665067832e-14,
    1.2267786282382607902e-15};
  double m2 = m * m, e = 0.0, o = 0.0;
  for (int k = 12; k >= 0; --k) e = e * m2 + ce[k];
  for (int k = 11; k >= 0; --k) o = o * m2 + co[k];
  *se = e; *so = o * m2; }
// Temme's g1 = (1/Gamma(1-mu) - 1/Gamma(1+mu)) / (2 mu), g2 = (1/Gamma(1-mu) + 1/Gamma(1+mu)) / 2
HD void hd_temme_gammas(double mu, double* g1, double* g2) {
  double se, so; hd_rgamma_taylor(mu, &se, &so);
  *g1 = -se; *g2 = 1.0 + so; }
HD double hd_rgamma1pm1(double a) {  // 1/Gamma(1 + a) - 1 for |a| <= 1, no cancellation
  double se, so; hd_rgamma_taylor(a, &se, &so);
  return so + a * se; }
// Hankel's expansion for large x: P and Q with J = sqrt(2/(pi x)) (P cos chi - Q sin chi)
HD void hd_hankel(double nu, double x, double* p, double* q) {
  double m = 4.0 * nu * nu, t = 1.0, P = 1.0, Q = 0.0, last = 2.0;
  for (int k = 1; k < 200; ++k) {
    double odd = 2.0 * k - 1.0;
    t *= (m - odd * odd) / (8.0 * k * x);
    if (fabs(t) > last && odd > 2.0 * nu) break;  // past its smallest term
    last = fabs(t);
    int r = k & 3;
    if (r == 0) P += t; else if (r == 1) Q += t; else if (r == 2) P -= t; else Q -= t;
    if (fabs(t) < 1e-17 * (fabs(P) + fabs(Q))) break;
  }
  *p = P; *q = Q; }
// J_nu(x), Y_nu(x) for nu >= 0, x > 0 (NaN where a continued fraction does not converge)
HDX void hd_bessel_jy(double nu, double x, double* jv, double* yv) {
  const double EPS = 1e-16, TINY = 1e-300;
  if (x >= 20.0 && 10.0 * x >= nu * nu) {  // Hankel's expansion is the more accurate
    double P, Q; hd_hankel(nu, x, &P, &Q);
    double ph = 0.5 * nu + 0.25, c = hd_cospi(ph), s = hd_sinpi(ph);
    double cx = cos(x), sx = sin(x), amp = sqrt(2.0 / (HD_PI * x));
    double cchi = cx * c + sx * s, schi = sx * c - cx * s;  // chi = x - (nu/2 + 1/4) pi
    *jv = amp * (P * cchi - Q * schi); *yv = amp * (P * schi + Q * cchi); return;
  }
  int nl = int(nu + 0.5);
  double mu = nu - nl, mu2 = mu * mu, xi = 1.0 / x, xi2 = 2.0 * xi;
  // g = J_nu / J_nu+1 = 2(nu+1)/x - 1/(2(nu+2)/x - ...) by Lentz's method; the signs of
  // its denominators' ratios multiply to the sign of J_nu+1
  double b = (nu + 1.0) * xi2, g = b, C = b, D = 0.0, sgn = 1.0;
  if (fabs(g) < TINY) g = C = TINY;
  int it = 0;
  for (; it < 1000000; ++it) {
    b += xi2;
    D = b - D; if (fabs(D) < TINY) D = TINY;
    C = b - 1.0 / C; if (fabs(C) < TINY) C = TINY;
    D = 1.0 / D;
    double delta = C * D;
    g *= delta;
    if (D < 0.0) sgn = -sgn;
    if (fabs(delta - 1.0) < EPS) break;
  }
  if (it == 1000000) { *jv = *yv = NAN; return; }
  // down from (J_nu, J_nu+1) to (J_mu, J_mu+1), unnormalized, rescaled against overflow
  double jl = sgn * g, jh = sgn, jnu = jl;
  for (int k = nl; k >= 0; --k) {  // (rescaled to |J_k| <= 1 against overflow)
    if (fabs(jl) > 1.0) { double r = 1.0 / fabs(jl); jl *= r; jh *= r; jnu *= r; }
    if (k == 0) break;
    double jt = (mu + k) * xi2 * jl - jh;
    jh = jl; jl = jt;
  }
  double rmu = jh / jl, w = xi2 / HD_PI, jmu, ymu, ymu1;
  if (x >= 20.0) {  // Hankel's expansions for J_mu, Y_mu, Y_mu+1 (small orders)
    double cx = cos(x), sx = sin(x), amp = sqrt(2.0 / (HD_PI * x)), P, Q;
    for (int k = 0; k < 2; ++k) {
      double nu_k = mu + k, ph = 0.5 * nu_k + 0.25, c = hd_cospi(ph), s = hd_sinpi(ph);
      double cchi = cx * c + sx * s, schi = sx * c - cx * s;
      hd_hankel(fabs(nu_k), x, &P, &Q);  // (it depends on the order's square only)
      if (k == 0) { jmu = amp * (P * cchi - Q * schi); ymu = amp * (P * schi + Q * cchi); }
      else ymu1 = amp * (P * schi + Q * cchi);
    }
  } else if (x < 2.0) {  // Temme's series for Y_mu and Y_mu+1
    double g1, g2; hd_temme_gammas(mu, &g1, &g2);
    double pimu = HD_PI * mu, lx = -log(0.5 * x), e = mu * lx;
    double r1 = fabs(pimu) < EPS ? 1.0 : pimu / sin(pimu);
    double r2 = fabs(e) < EPS ? 1.0 : sinh(e) / e;
    double ff = (2.0 / HD_PI) * r1 * (cosh(e) * g1 + r2 * lx * g2);
    double ee = exp(e);
    double p = ee / (HD_PI * (g2 - mu * g1)), q = 1.0 / (ee * HD_PI * (g2 + mu * g1));
    double h = 0.5 * pimu, r3 = fabs(h) < EPS ? 1.0 : sin(h) / h;
    double rq = HD_PI * h * r3 * r3;  // (2/mu) sin^2(pi mu / 2)
    double c = 1.0, d = -0.25 * x * x, sum = ff + rq * q, sum1 = p;
    for (int i = 1; i < 100000; ++i) {
      ff = (i * ff + p + q) / (i * (double)i - mu2);
      c *= d / i; p /= i - mu; q /= i + mu;
      double del = c * (ff + rq * q);
      sum += del;
      sum1 += c * p - i * del;
      if (fabs(del) < (1.0 + fabs(sum)) * EPS) break;
    }
    ymu = -sum; ymu1 = -sum1 * xi2;
    jmu = w / (rmu * ymu - ymu1);  // the Wronskian J_mu+1 Y_mu - J_mu Y_mu+1 = 2/(pi x)
  } else {  // Steed: p + iq = (J' + iY') / (J + iY), a complex continued fraction
    double hr = -0.5 * xi, hi = 1.0;  // b_0
    double Cr = hr, Ci = hi, Dr = 0.0, Di = 0.0;
    int k = 1;
    for (; k < 1000000; ++k) {
      double ar = (k - 0.5) * (k - 0.5) - mu2, ai = 0.0;
      if (k == 1) { ai = ar * xi; ar = 0.0; }  // a_1 = i (1/4 - mu^2) / x
      double br = 2.0 * x, bi = 2.0 * k;
      // D = 1 / (b + a D)
      double tr = br + ar * Dr - ai * Di, ti = bi + ar * Di + ai * Dr;
      if (fabs(tr) + fabs(ti) < TINY) tr = TINY;
      double den = tr * tr + ti * ti;
      Dr = tr / den; Di = -ti / den;
      // C = b + a / C
      den = Cr * Cr + Ci * Ci;
      double qr = (ar * Cr + ai * Ci) / den, qi = (ai * Cr - ar * Ci) / den;
      Cr = br + qr; Ci = bi + qi;
      if (fabs(Cr) + fabs(Ci) < TINY) Cr = TINY;
      double dr = Cr * Dr - Ci * Di, di = Cr * Di + Ci * Dr;
      double nr = hr * dr - hi * di; hi = hr * di + hi * dr; hr = nr;
      if (fabs(dr - 1.0) + fabs(di) < EPS) break;
    }
    if (k == 1000000) { *jv = *yv = NAN; return; }
    double fmu = mu * xi - rmu;  // J'_mu / J_mu
    double gam = (hr - fmu) / hi;
    jmu = sqrt(w / ((hr - fmu) * gam + hi));
    if (jl < 0.0) jmu = -jmu;
    ymu = gam * jmu;
    ymu1 = mu * xi * ymu - (hr * ymu + hi * jmu);  // Y'_mu = p Y + q J
  }
  *jv = jnu * (jmu / jl);
  for (int i = 1; i <= nl && !isinf(ymu); ++i) {
    double yt = (mu + i) * xi2 * ymu1 - ymu;
    ymu = ymu1; ymu1 = yt;
  }
  *yv = isnan(ymu) ? -INFINITY : ymu; }
// I_nu(x) and K_nu(x) for nu >= 0, x > 0; with scaled, I e^-x and K e^x
HDX void hd_bessel_ik(double nu, double x, bool scaled, double* iv, double* kv) {
  const double EPS = 1e-16, TINY = 1e-300;
  if (x > 1000.0 && x > nu * nu) {  // Hankel's expansions
    double m = 4.0 * nu * nu, t = 1.0, si = 1.0, sk = 1.0, last = 2.0;
    for (int k = 1; k < 200; ++k) {
      double odd = 2.0 * k - 1.0;
      t *= (m - odd * odd) / (8.0 * k * x);
      if (fabs(t) > last) break;
      last = fabs(t);
      si += (k & 1) ? -t : t; sk += t;
      if (fabs(t) < 1e-17) break;
    }
    double ie = si / sqrt(2.0 * HD_PI * x), ke = sk * sqrt(HD_PI / (2.0 * x));
    *iv = scaled ? ie : exp(log(ie) + x);
    *kv = scaled ? ke : ke * exp(-x);
    return;
  }
  int nl = int(nu + 0.5);
  double mu = nu - nl, mu2 = mu * mu, xi = 1.0 / x, xi2 = 2.0 * xi;
  // r = I_nu+1 / I_nu = 1/(2(nu+1)/x + 1/(2(nu+2)/x + ...))
  double b = (nu + 1.0) * xi2, g = b, C = b, D = 0.0;
  int it = 0;
  for (; it < 1000000; ++it) {
    b += xi2;
    D = 1.0 / (b + D);
    C = b + 1.0 / C;
    double delta = C * D;
    g *= delta;
    if (fabs(delta - 1.0) < EPS) break;
  }
  if (it == 1000000) { *iv = *kv = NAN; return; }
  double il = 1.0, ih = 1.0 / g, inu = 1.0;
  for (int k = nl; k >= 1; --k) {
    double t = (mu + k) * xi2 * il + ih;
    ih = il; il = t;
    if (il > 1.0) { double r = 1.0 / il; il = 1.0; ih *= r; inu *= r; }
  }
  double rmu = ih / il, kmu, kmu1;  // K_mu e^x, K_mu+1 e^x
  if (x < 2.0) {  // Temme's series for K_mu and K_mu+1
    double g1, g2; hd_temme_gammas(mu, &g1, &g2);
    double pimu = HD_PI * mu, lx = -log(0.5 * x), e = mu * lx;
    double r1 = fabs(pimu) < EPS ? 1.0 : pimu / sin(pimu);
    double r2 = fabs(e) < EPS ? 1.0 : sinh(e) / e;
    double ff = r1 * (cosh(e) * g1 + r2 * lx * g2);
    double ee = exp(e);
    double p = 0.5 * ee / (g2 - mu * g1), q = 0.5 / (ee * (g2 + mu * g1));
    double c = 1.0, d = 0.25 * x * x, sum = ff, sum1 = p;
    for (int i = 1; i < 100000; ++i) {
      ff = (i * ff + p + q) / (i * (double)i - mu2);
      c *= d / i; p /= i - mu; q /= i + mu;
      double del = c * ff;
      sum += del;
      sum1 += c * (p - i * ff);
      if (fabs(del) < fabs(sum) * EPS) break;
    }
    double ex = exp(x);
    kmu = sum * ex; kmu1 = sum1 * xi2 * ex;
  } else {  // Temme's continued fraction: K_mu e^x = sqrt(pi/(2x)) / s
    double a1 = 0.25 - mu2, bb = 2.0 * (1.0 + x), dd = 1.0 / bb, delh = dd, h = dd;
    double q1 = 0.0, q2 = 1.0, q = a1, c = a1, a = -a1, s = 1.0 + q * delh;
    for (int i = 2; i < 1000000; ++i) {
      a -= 2.0 * (i - 1);
      c = -a * c / i;
      double qn = (q1 - bb * q2) / a;
      q1 = q2; q2 = qn; q += c * qn;
      bb += 2.0;
      dd = 1.0 / (bb + a * dd);
      delh = (bb * dd - 1.0) * delh;
      h += delh;
      double ds = q * delh;
      s += ds;
      if (fabs(ds / s) < EPS) break;
    }
    kmu = sqrt(HD_PI / (2.0 * x)) / s;
    kmu1 = kmu * (mu + x + 0.5 - a1 * h) * xi;
  }
  // the Wronskian I_mu K_mu+1 + I_mu+1 K_mu = 1/x gives I_mu e^-x
  double ie = inu * (xi / (kmu1 + rmu * kmu) / il), lk = 0.0;  // K_nu e^x = kmu e^lk
  for (int i = 1; i <= nl; ++i) {
    double kt = (mu + i) * xi2 * kmu1 + kmu;
    kmu = kmu1; kmu1 = kt;
    if (kmu1 > 1e250) { kmu *= 1e-250; kmu1 *= 1e-250; lk += 575.64627324851142; }
  }
  *iv = scaled ? ie : (x < 700.0 ? ie * exp(x) : exp(log(ie) + x));
  if (scaled) *kv = lk == 0.0 ? kmu : exp(log(kmu) + lk);
  else *kv = (lk == 0.0 && x < 700.0) ? kmu * exp(-x) : exp(log(kmu) + lk - x); }
HD bool hd_is_int(double v) { return v == floor(v) && !isinf(v); }
HD bool hd_bessel_tiny(double nu, double x) { return x * x < 1e-17 * (nu + 1.0); }
HD double hd_bessel_lead(double nu, double x) {  // (x/2)^nu / Gamma(nu + 1): J, I at tiny x
  return nu < 170.0 ? pow(0.5 * x, nu) / tgamma(nu + 1.0)
                    : exp(nu * log(0.5 * x) - lgamma(nu + 1.0)); }
HD double hd_parity(double v) { return fmod(fabs(v), 2.0) == 1.0 ? -1.0 : 1.0; }
HD double hd_mul0(double c, double y) { return c == 0.0 ? 0.0 : c * y; }  // 0 inf = 0
// scipy's conventions: NaN at x = +-inf (kv: 0 at +inf) and for a non-integer order
// at x < 0; at x = 0 the limits; at an infinite order 0 (jv, iv) or NaN
HDX double hd_bessel_jv(double v, double x) {
  if (isnan(v) || isnan(x) || isinf(x)) return NAN;
  if (isinf(v)) return x < 0.0 ? NAN : 0.0;
  double sign = 1.0;
  if (x < 0.0) {
    if (!hd_is_int(v)) return NAN;
    sign = hd_parity(v); x = -x;
  }
  if (x == 0.0) return v == 0.0 ? 1.0 : (v > 0.0 || hd_is_int(v) ? 0.0 : INFINITY);
  double nu = fabs(v), j, y;
  if (v >= 0.0 && hd_bessel_tiny(nu, x)) return sign * hd_bessel_lead(nu, x);
  hd_bessel_jy(nu, x, &j, &y);
  if (v < 0.0) {
    if (hd_is_int(v)) j *= hd_parity(v);
    else j = hd_mul0(hd_cospi(nu), j) - hd_mul0(hd_sinpi(nu), y);
  }
  return sign * j; }
HDX double hd_bessel_yv(double v, double x) {
  if (isnan(v) || isnan(x) || x < 0.0 || isinf(x)) return NAN;
  if (x == 0.0) return (v < 0.0 && hd_is_int(v) && hd_parity(v) < 0.0) ? INFINITY : -INFINITY;
  if (isinf(v)) return NAN;
  double nu = fabs(v), j, y;
  hd_bessel_jy(nu, x, &j, &y);
  if (v < 0.0) {
    if (hd_is_int(v)) y *= hd_parity(v);
    else y = hd_mul0(hd_sinpi(nu), j) + hd_mul0(hd_cospi(nu), y);
  }
  return y; }
HDX double hd_bessel_iv(double v, double x, bool scaled) {
  if (isnan(v) || isnan(x) || isinf(x)) return NAN;
  if (isinf(v)) return scaled ? NAN : 0.0;
  double sign = 1.0;
  if (x < 0.0) {
    if (!hd_is_int(v)) return NAN;
    sign = hd_parity(v); x = -x;
  }
  if (x == 0.0) {
    if (v == 0.0) return 1.0;
    if (v > 0.0 || hd_is_int(v)) return 0.0;
    return scaled ? NAN : INFINITY;
  }
  double nu = fabs(v), i, k;
  if (v >= 0.0 && hd_bessel_tiny(nu, x))
    return sign * hd_bessel_lead(nu, x) * (scaled ? exp(-x) : 1.0);
  hd_bessel_ik(nu, x, scaled, &i, &k);
  if (v < 0.0 && !hd_is_int(v)) {  // I_-nu = I_nu + (2/pi) sin(nu pi) K_nu
    double kk = scaled ? k * exp(-2.0 * x) : k;
    i += hd_mul0((2.0 / HD_PI) * hd_sinpi(nu), kk);
  }
  return sign * i; }
HDX double hd_bessel_kv(double v, double x, bool scaled) {
  if (isnan(x) || x < 0.0) return NAN;
  if (x == 0.0) return INFINITY;
  if (isnan(v)) return NAN;
  if (isinf(v)) return NAN;
  if (isinf(x)) return scaled ? NAN : 0.0;
  double i, k;
  hd_bessel_ik(fabs(v), x, scaled, &i, &k);
  return k; }
template <typename T> HD T hd_jv(T v, T x) { return T(hd_bessel_jv(double(v), double(x))); }
template <typename T> HD T hd_yv(T v, T x) { return T(hd_bessel_yv(double(v), double(x))); }
template <typename T> HD T hd_iv(T v, T x) { return T(hd_bessel_iv(double(v), double(x), false)); }
template <typename T> HD T hd_ive(T v, T x) { return T(hd_bessel_iv(double(v), double(x), true)); }
template <typename T> HD T hd_kv(T v, T x) { return T(hd_bessel_kv(double(v), double(x), false)); }
template <typename T> HD T hd_kve(T v, T x) { return T(hd_bessel_kv(double(v), double(x), true)); }
template <typename N, typename T> HD T hd_yn(N n, T x) {  // an integer order, as scipy's
  // NaN beyond a C int (scipy's ufunc: order INT_MIN on x86, -inf at small x; the
  // real-order algorithm is not accurate at such orders)
  double v = double(n);
  return !(v > -2147483649.0 && v < 2147483648.0) ? T(NAN)
         : T(hd_bessel_yv(trunc(v), double(x))); }
template <typename T> HD T hd_k0(T x) { return T(hd_bessel_kv(0.0, double(x), false)); }
template <typename T> HD T hd_k1(T x) { return T(hd_bessel_kv(1.0, double(x), false)); }
template <typename T> HD T hd_k0e(T x) {  // (0 at +inf, where scipy's kve is NaN)
  return x == T(INFINITY) ? T(0) : T(hd_bessel_kv(0.0, double(x), true)); }
template <typename T> HD T hd_k1e(T x) {
  return x == T(INFINITY) ? T(0) : T(hd_bessel_kv(1.0, double(x), true)); }
"""
