// resize_box_bilinear against a float64 reference of PIL's bilinear resampling, and the
// properties the ImageNet recipe relies on (identity, flip, valid-range clipping, resize + crop
// in one pass).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "data/image/crop_geometry.h"
#include "data/image/resize.h"
#include "kiln/error.h"

namespace kiln {
namespace {

struct Image {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // HWC, rows packed
  ImageView view() const { return {pixels.data(), width, height, channels, int64_t(width) * channels}; }
  uint8_t at(int x, int y, int c) const { return pixels[(size_t(y) * width + x) * channels + c]; }
};

Image random_image(int width, int height, int channels, std::mt19937& rng) {
  Image im{width, height, channels, std::vector<uint8_t>(size_t(width) * height * channels)};
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& p : im.pixels) p = uint8_t(byte(rng));
  return im;
}

// A smooth image with noise (closer to a photo than pure noise).
Image photo_like(int width, int height, int channels, std::mt19937& rng) {
  Image im = random_image(width, height, channels, rng);
  std::uniform_real_distribution<double> phase(0, 6.28);
  const double a = phase(rng), b = phase(rng);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c) {
        double v = 128 + 90 * std::sin(x * 0.05 + a + c) * std::cos(y * 0.07 + b) + (im.at(x, y, c) - 128) * 0.15;
        im.pixels[(size_t(y) * width + x) * channels + c] = uint8_t(std::clamp(std::lround(v), 0L, 255L));
      }
  return im;
}

Image run(const Image& src, double bx, double by, double bw, double bh, int vx0, int vy0, int vx1, int vy1, int out_w,
          int out_h, bool flip, PassOrder order = PassOrder::HorizontalFirst) {
  Image out{out_w, out_h, src.channels, std::vector<uint8_t>(size_t(out_w) * out_h * src.channels, 0xAB)};
  resize_box_bilinear(src.view(), bx, by, bw, bh, vx0, vy0, vx1, vy1, out_w, out_h, flip, out.pixels.data(),
                      int64_t(out_w) * src.channels, order);
  return out;
}
Image run_whole(const Image& src, int out_w, int out_h, bool flip = false,
                PassOrder order = PassOrder::HorizontalFirst) {
  return run(src, 0, 0, src.width, src.height, 0, 0, src.width, src.height, out_w, out_h, flip, order);
}
Image transposed(const Image& im) {
  Image t{im.height, im.width, im.channels, std::vector<uint8_t>(im.pixels.size())};
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x)
      for (int c = 0; c < im.channels; ++c) t.pixels[(size_t(x) * t.width + y) * im.channels + c] = im.at(x, y, c);
  return t;
}

// ---- the float64 reference: PIL's filter written plainly ----

// weights[i][x]: the normalized weight of valid pixel x (relative to valid0) for output i,
// taken over the whole valid range (no window bookkeeping).
std::vector<std::vector<double>> reference_weights(double box_start, double box_len, int valid0, int valid1,
                                                   int out_len) {
  const double scale = box_len / out_len;
  const double fs = std::max(scale, 1.0);
  std::vector<std::vector<double>> weights(out_len, std::vector<double>(valid1 - valid0, 0.0));
  for (int i = 0; i < out_len; ++i) {
    const double center = (box_start - valid0) + (i + 0.5) * scale;
    double sum = 0;
    for (int x = 0; x < valid1 - valid0; ++x) {
      const double t = std::abs(x + 0.5 - center) / fs;
      weights[i][x] = t < 1 ? 1 - t : 0;
      sum += weights[i][x];
    }
    for (double& w : weights[i]) w /= sum;
  }
  return weights;
}

// The reference result, and which of its values sit so close to a rounding tie (x.5) that PIL's
// fixed-point weights (22 fractional bits) may round them either way: there, and downstream of
// such an intermediate value, the two may differ by 1; everywhere else they must agree exactly.
struct Reference {
  Image image;
  std::vector<uint8_t> near_tie;
};

// Rounds the exact sum `s` of `taps` nonzero-weight terms; flags a near tie.
uint8_t round_pil(double s, int taps, bool& near_tie) {
  const double eps = 255.0 * taps * std::ldexp(1.0, -23) + 1e-9;  // fixed-point weight error bound
  const double frac = s - std::floor(s);
  near_tie = std::abs(frac - 0.5) <= eps;
  return uint8_t(std::clamp(std::floor(s + 0.5), 0.0, 255.0));
}

Reference reference(const Image& src, double bx, double by, double bw, double bh, int vx0, int vy0, int vx1,
                    int vy1, int out_w, int out_h, bool flip) {
  const int C = src.channels;
  const auto wx = reference_weights(bx, bw, vx0, vx1, out_w);
  const auto wy = reference_weights(by, bh, vy0, vy1, out_h);
  // Horizontal pass over every valid row, into 8 bits.
  std::vector<uint8_t> mid(size_t(vy1 - vy0) * out_w * C), mid_tie(mid.size());
  for (int y = vy0; y < vy1; ++y)
    for (int i = 0; i < out_w; ++i)
      for (int c = 0; c < C; ++c) {
        double s = 0;
        int taps = 0;
        for (int x = vx0; x < vx1; ++x) {
          s += wx[i][x - vx0] * src.at(x, y, c);
          taps += wx[i][x - vx0] > 0;
        }
        const size_t at = (size_t(y - vy0) * out_w + i) * C + c;
        bool tie;
        mid[at] = round_pil(s, taps, tie);
        mid_tie[at] = tie;
      }
  Reference ref{{out_w, out_h, C, std::vector<uint8_t>(size_t(out_w) * out_h * C)}, {}};
  ref.near_tie.resize(ref.image.pixels.size());
  for (int j = 0; j < out_h; ++j)
    for (int i = 0; i < out_w; ++i)
      for (int c = 0; c < C; ++c) {
        double s = 0;
        int taps = 0;
        bool upstream_tie = false;
        for (int y = 0; y < vy1 - vy0; ++y) {
          const size_t at = (size_t(y) * out_w + i) * C + c;
          s += wy[j][y] * mid[at];
          taps += wy[j][y] > 0;
          upstream_tie |= wy[j][y] > 0 && mid_tie[at];
        }
        const size_t at = (size_t(j) * out_w + (flip ? out_w - 1 - i : i)) * C + c;
        bool tie;
        ref.image.pixels[at] = round_pil(s, taps, tie);
        ref.near_tie[at] = tie || upstream_tie;
      }
  return ref;
}

struct Diff {
  int max = 0;
  int64_t mismatches = 0, total = 0;
  int64_t near_ties = 0, exact_mismatches = 0;  // mismatches away from near ties: must be 0
  void add(const Diff& d) {
    max = std::max(max, d.max);
    mismatches += d.mismatches;
    total += d.total;
    near_ties += d.near_ties;
    exact_mismatches += d.exact_mismatches;
  }
};
Diff compare(const Image& a, const Image& b) {
  EXPECT_EQ(a.pixels.size(), b.pixels.size());
  Diff d;
  for (size_t i = 0; i < std::min(a.pixels.size(), b.pixels.size()); ++i) {
    const int e = std::abs(int(a.pixels[i]) - int(b.pixels[i]));
    d.max = std::max(d.max, e);
    d.mismatches += e != 0;
    ++d.total;
  }
  return d;
}
Diff compare(const Image& got, const Reference& want) {
  Diff d = compare(got, want.image);
  for (size_t i = 0; i < std::min(got.pixels.size(), want.image.pixels.size()); ++i) {
    d.near_ties += want.near_tie[i];
    d.exact_mismatches += !want.near_tie[i] && got.pixels[i] != want.image.pixels[i];
  }
  return d;
}
void print(const char* what, const Diff& d) {
  std::printf("[ resize  ] %s: max |diff| %d; %lld of %lld values differ (%.4f%%); %lld near rounding ties "
              "(%.3f%%), %lld differences elsewhere\n",
              what, d.max, (long long)d.mismatches, (long long)d.total, 100.0 * d.mismatches / d.total,
              (long long)d.near_ties, 100.0 * d.near_ties / d.total, (long long)d.exact_mismatches);
}

TEST(Resize, HandComputedPilValues) {
  // 4 -> 2 at scale 2: support 2; output 0 (center 1) weighs pixels 0,1,2 by 3/7, 3/7, 1/7 and
  // output 1 (center 3) pixels 1,2,3 by 1/7, 3/7, 3/7 (PIL's antialiased bilinear, not a 2x2 average).
  Image row{4, 1, 1, {10, 20, 30, 40}};
  Image out = run_whole(row, 2, 1);
  EXPECT_EQ(out.pixels, (std::vector<uint8_t>{17, 33}));  // 120/7 = 17.14, 230/7 = 32.86
  Image col{1, 4, 1, {10, 20, 30, 40}};
  EXPECT_EQ(run_whole(col, 1, 2).pixels, (std::vector<uint8_t>{17, 33}));
  // 2 -> 4 (upscaling, support 1): centers 0.25, 0.75, 1.25, 1.75; edge outputs see one pixel.
  Image two{2, 1, 1, {0, 100}};
  EXPECT_EQ(run_whole(two, 4, 1).pixels, (std::vector<uint8_t>{0, 25, 75, 100}));
}

TEST(Resize, MatchesFloatReference) {
  std::mt19937 rng(20240611);
  struct Case {
    int w, h, c, out_w, out_h;
    double bx, by, bw, bh;
    int vx0, vy0, vx1, vy1;
  };
  std::vector<Case> cases = {
      {300, 300, 3, 224, 224, 0, 0, 300, 300, 0, 0, 300, 300},          // downscale
      {500, 375, 3, 224, 224, 37, 21, 311, 287, 37, 21, 348, 308},      // RandomResizedCrop-like
      {64, 48, 3, 224, 224, 3, 5, 40, 30, 3, 5, 43, 35},                // upscale
      {97, 71, 1, 53, 89, 2.25, 3.75, 90.5, 60.125, 0, 0, 97, 71},      // fractional box, mixed
      {120, 90, 4, 31, 17, 10.5, 0.3, 99.7, 88.1, 0, 0, 120, 90},       // 4 channels
      {50, 60, 2, 33, 71, 0, 0, 50, 60, 0, 0, 50, 60},                  // generic channel count
      {1000, 700, 3, 224, 224, 100, 50, 800, 600, 100, 50, 900, 650},   // strong downscale
      {31, 29, 3, 1, 17, 0, 0, 31, 29, 0, 0, 31, 29},                   // 1-wide output
      {31, 29, 3, 23, 1, 0.5, 0.5, 30, 28, 0, 0, 31, 29},               // 1-high output
      {1, 40, 3, 5, 9, 0, 0, 1, 40, 0, 0, 1, 40},                       // 1-wide source
      {40, 1, 1, 9, 5, 0, 0, 40, 1, 0, 0, 40, 1},                       // 1-high source
  };
  Diff downscale, upscale;
  for (const Case& k : cases)
    for (int photo = 0; photo < 2; ++photo)
      for (int flip = 0; flip < 2; ++flip) {
        const Image src = photo ? photo_like(k.w, k.h, k.c, rng) : random_image(k.w, k.h, k.c, rng);
        const Image got = run(src, k.bx, k.by, k.bw, k.bh, k.vx0, k.vy0, k.vx1, k.vy1, k.out_w, k.out_h, flip);
        const Reference want =
            reference(src, k.bx, k.by, k.bw, k.bh, k.vx0, k.vy0, k.vx1, k.vy1, k.out_w, k.out_h, flip);
        const Diff d = compare(got, want);
        EXPECT_LE(d.max, 1) << k.w << "x" << k.h << " -> " << k.out_w << "x" << k.out_h;
        EXPECT_EQ(d.exact_mismatches, 0) << k.w << "x" << k.h << " -> " << k.out_w << "x" << k.out_h;
        (k.out_w > k.bw ? upscale : downscale).add(d);
      }
  print("vs float64 reference, downscaling", downscale);
  print("vs float64 reference, upscaling", upscale);
  EXPECT_LE(downscale.mismatches + upscale.mismatches, (downscale.total + upscale.total) / 100);
}

TEST(Resize, RandomBoxesMatchReference) {
  std::mt19937 rng(77);
  std::uniform_int_distribution<int> side(1, 90), channels(1, 4);
  std::uniform_real_distribution<double> u(0, 1);
  Diff all;
  for (int trial = 0; trial < 150; ++trial) {
    const int w = side(rng), h = side(rng), c = channels(rng);
    const Image src = random_image(w, h, c, rng);
    const int vx0 = int(u(rng) * w * 0.3), vy0 = int(u(rng) * h * 0.3);
    const int vx1 = std::max(vx0 + 1, w - int(u(rng) * w * 0.3)), vy1 = std::max(vy0 + 1, h - int(u(rng) * h * 0.3));
    const double bx = vx0 + u(rng) * (vx1 - vx0) * 0.2, by = vy0 + u(rng) * (vy1 - vy0) * 0.2;
    const double bw = std::max(0.25, (vx1 - bx) * (0.5 + 0.5 * u(rng)));
    const double bh = std::max(0.25, (vy1 - by) * (0.5 + 0.5 * u(rng)));
    const int ow = side(rng), oh = side(rng);
    const bool flip = trial % 2;
    const Diff d = compare(run(src, bx, by, bw, bh, vx0, vy0, vx1, vy1, ow, oh, flip),
                           reference(src, bx, by, bw, bh, vx0, vy0, vx1, vy1, ow, oh, flip));
    EXPECT_LE(d.max, 1) << "trial " << trial;
    EXPECT_EQ(d.exact_mismatches, 0) << "trial " << trial;
    all.add(d);
  }
  print("random boxes vs float64 reference", all);
}

TEST(Resize, IdentityAndIntegralCropsAreExact) {
  std::mt19937 rng(5);
  for (int c : {1, 3}) {
    const Image src = random_image(37, 23, c, rng);
    EXPECT_EQ(run_whole(src, 37, 23).pixels, src.pixels);
    // Scale 1 at an integral offset: a plain crop.
    const Image crop = run(src, 5, 7, 20, 11, 0, 0, 37, 23, 20, 11, false);
    for (int y = 0; y < 11; ++y)
      for (int x = 0; x < 20; ++x)
        for (int k = 0; k < c; ++k) ASSERT_EQ(crop.at(x, y, k), src.at(x + 5, y + 7, k));
    // Scale 1 on one axis only: that axis is copied, the other resampled.
    const Image half = run(src, 0, 3, 37, 17, 0, 0, 37, 23, 19, 17, false);
    EXPECT_EQ(compare(half, reference(src, 0, 3, 37, 17, 0, 0, 37, 23, 19, 17, false)).exact_mismatches, 0);
    const Image half2 = run(src, 2, 0, 30, 23, 0, 0, 37, 23, 30, 9, true);
    EXPECT_EQ(compare(half2, reference(src, 2, 0, 30, 23, 0, 0, 37, 23, 30, 9, true)).exact_mismatches, 0);
  }
}

TEST(Resize, FractionalBoxDiffersFromIntegralBox) {
  std::mt19937 rng(6);
  const Image src = photo_like(80, 60, 3, rng);
  const Image a = run(src, 10, 10, 40, 30, 0, 0, 80, 60, 40, 30, false);
  const Image b = run(src, 10.5, 10.25, 40, 30, 0, 0, 80, 60, 40, 30, false);
  EXPECT_NE(a.pixels, b.pixels);  // the shifted box is resampled, not copied
  const Diff d = compare(b, reference(src, 10.5, 10.25, 40, 30, 0, 0, 80, 60, 40, 30, false));
  EXPECT_LE(d.max, 1);
  EXPECT_EQ(d.exact_mismatches, 0);
}

TEST(Resize, FlipMirrorsExactly) {
  std::mt19937 rng(7);
  for (int c : {1, 3, 4}) {
    for (auto [w, h, ow, oh] : {std::tuple{300, 200, 224, 224}, {50, 40, 50, 40}, {50, 40, 50, 20}, {13, 9, 40, 1}}) {
      const Image src = random_image(w, h, c, rng);
      const Image plain = run(src, 0, 0, w, h, 0, 0, w, h, ow, oh, false);
      const Image flipped = run(src, 0, 0, w, h, 0, 0, w, h, ow, oh, true);
      for (int y = 0; y < oh; ++y)
        for (int x = 0; x < ow; ++x)
          for (int k = 0; k < c; ++k) ASSERT_EQ(flipped.at(x, y, k), plain.at(ow - 1 - x, y, k)) << w << "x" << h;
    }
  }
}

// The 3- and 4-channel passes (vectorized, and scalar at the right edge) against the 1-channel
// pass on each plane: channels never mix, so they must agree exactly.
TEST(Resize, ChannelsAreIndependent) {
  std::mt19937 rng(14);
  struct Case {
    int w, h, out_w, out_h;
    double bx, by, bw, bh;
  };
  for (int c : {3, 4, 2})
    for (const Case& k : std::vector<Case>{{300, 200, 224, 224, 0, 0, 300, 200},      // 4 taps
                                           {500, 375, 224, 224, 120.5, 3, 379.5, 372},  // right edge
                                           {64, 48, 224, 224, 0, 0, 64, 48},            // upscale, 3 taps
                                           {90, 70, 40, 33, 0, 0, 90, 70},              // 5-6 taps
                                           {700, 90, 40, 9, 0, 0, 700, 90},             // > 8 taps
                                           {9, 7, 1, 1, 0, 0, 9, 7},
                                           {2, 2, 7, 3, 0, 0, 2, 2}})
      for (bool flip : {false, true}) {
        const Image src = random_image(k.w, k.h, c, rng);
        const Image all = run(src, k.bx, k.by, k.bw, k.bh, 0, 0, k.w, k.h, k.out_w, k.out_h, flip);
        for (int plane = 0; plane < c; ++plane) {
          Image one{k.w, k.h, 1, {}};
          for (size_t i = plane; i < src.pixels.size(); i += c) one.pixels.push_back(src.pixels[i]);
          const Image got = run(one, k.bx, k.by, k.bw, k.bh, 0, 0, k.w, k.h, k.out_w, k.out_h, flip);
          for (int i = 0; i < k.out_w * k.out_h; ++i)
            ASSERT_EQ(got.pixels[i], all.pixels[size_t(i) * c + plane])
                << c << " channels, " << k.w << "x" << k.h << " -> " << k.out_w << "x" << k.out_h;
        }
      }
}

// Vertical first (Pillow 13's order for some shapes) is horizontal first on the transposed image.
TEST(Resize, VerticalFirstIsTheTransposedHorizontalFirst) {
  std::mt19937 rng(15);
  struct Case {
    int w, h, out_w, out_h;
    double bx, by, bw, bh;
    int vx0, vy0, vx1, vy1;
  };
  int64_t differ_from_h_first = 0;
  for (int c : {1, 3, 4})
    for (const Case& k : std::vector<Case>{{211, 238, 224, 224, 0, 0, 211, 238, 0, 0, 211, 238},
                                           {500, 375, 224, 224, 37, 21, 311, 287, 37, 21, 348, 308},
                                           {300, 400, 150, 99, 0, 0, 300, 400, 0, 0, 300, 400},
                                           {120, 90, 31, 17, 10.5, 0.25, 99.75, 88.125, 0, 0, 120, 90},
                                           {640, 60, 700, 5, 0, 0, 640, 60, 0, 0, 640, 60},
                                           {90, 700, 9, 40, 0, 0, 90, 700, 0, 0, 90, 700}}) {
      const Image src = photo_like(k.w, k.h, c, rng);
      const PassOrder vf = PassOrder::VerticalFirst;
      const Image v_first = run(src, k.bx, k.by, k.bw, k.bh, k.vx0, k.vy0, k.vx1, k.vy1, k.out_w, k.out_h, false, vf);
      const Image via_transpose = transposed(run(transposed(src), k.by, k.bx, k.bh, k.bw, k.vy0, k.vx0, k.vy1, k.vx1,
                                                 k.out_h, k.out_w, false, PassOrder::HorizontalFirst));
      ASSERT_EQ(v_first.pixels, via_transpose.pixels) << c << " channels, " << k.w << "x" << k.h;
      const Image flipped = run(src, k.bx, k.by, k.bw, k.bh, k.vx0, k.vy0, k.vx1, k.vy1, k.out_w, k.out_h, true, vf);
      for (int y = 0; y < k.out_h; ++y)
        for (int x = 0; x < k.out_w; ++x)
          for (int ch = 0; ch < c; ++ch) ASSERT_EQ(flipped.at(x, y, ch), v_first.at(k.out_w - 1 - x, y, ch));
      const Image h_first = run(src, k.bx, k.by, k.bw, k.bh, k.vx0, k.vy0, k.vx1, k.vy1, k.out_w, k.out_h, false);
      const Diff d = compare(v_first, h_first);
      EXPECT_LE(d.max, 1);
      differ_from_h_first += d.mismatches;
    }
  EXPECT_GT(differ_from_h_first, 0) << "the order makes no difference: was VerticalFirst ignored?";
}

TEST(Resize, Pillow13PassOrder) {
  // Vertical first when the height shrinks by more than twice as many pixels as the width
  // (boundaries as measured against Pillow 13.0.0).
  EXPECT_EQ(pillow13_pass_order(200, 200, 150, 99), PassOrder::VerticalFirst);
  EXPECT_EQ(pillow13_pass_order(200, 200, 150, 100), PassOrder::HorizontalFirst);
  EXPECT_EQ(pillow13_pass_order(150, 300, 100, 199), PassOrder::VerticalFirst);
  EXPECT_EQ(pillow13_pass_order(150, 300, 100, 200), PassOrder::HorizontalFirst);
  EXPECT_EQ(pillow13_pass_order(211, 238, 224, 224), PassOrder::VerticalFirst);  // width up, height down
  EXPECT_EQ(pillow13_pass_order(100, 100, 224, 224), PassOrder::HorizontalFirst);  // both up
  EXPECT_EQ(pillow13_pass_order(300, 150, 199, 10), PassOrder::HorizontalFirst);
  EXPECT_EQ(pillow13_pass_order(200, 100, 150, 100), PassOrder::HorizontalFirst);  // height unchanged
}

TEST(Resize, ConstantImageStaysConstant) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> side(1, 400), byte(0, 255);
  for (int trial = 0; trial < 60; ++trial) {
    const int w = side(rng), h = side(rng), c = trial % 2 ? 3 : 1;
    const uint8_t value = trial < 2 ? uint8_t(255 * trial) : uint8_t(byte(rng));
    Image src{w, h, c, std::vector<uint8_t>(size_t(w) * h * c, value)};
    const int ow = std::max(1, side(rng) / 2), oh = std::max(1, side(rng) / 2);
    const Image out = run(src, 0.3, 0.7, w * 0.9, h * 0.8, 0, 0, w, h, ow, oh, trial % 3 == 0);
    for (uint8_t p : out.pixels) ASSERT_EQ(p, value) << w << "x" << h << " -> " << ow << "x" << oh;
  }
}

TEST(Resize, DegenerateSizes) {
  std::mt19937 rng(9);
  const Image px{1, 1, 3, {9, 99, 199}};
  const Image big = run_whole(px, 5, 3);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(big.pixels[i], px.pixels[i % 3]);
  const Image src = random_image(17, 13, 3, rng);
  for (auto [ow, oh] : {std::pair{1, 1}, {1, 13}, {17, 1}, {1, 40}, {40, 1}}) {
    const Diff d = compare(run_whole(src, ow, oh), reference(src, 0, 0, 17, 13, 0, 0, 17, 13, ow, oh, false));
    EXPECT_LE(d.max, 1) << ow << "x" << oh;
    EXPECT_EQ(d.exact_mismatches, 0) << ow << "x" << oh;
  }
}

TEST(Resize, ValidRangeClipsTheWindow) {
  // RandomResizedCrop: torchvision crops, then resizes, so pixels outside the crop never count.
  std::mt19937 rng(10);
  Image src = random_image(120, 90, 3, rng);
  const int x0 = 20, y0 = 15, x1 = 95, y1 = 80;
  for (int y = 0; y < 90; ++y)  // make the outside very different from the inside
    for (int x = 0; x < 120; ++x)
      if (x < x0 || x >= x1 || y < y0 || y >= y1)
        for (int c = 0; c < 3; ++c) src.pixels[(size_t(y) * 120 + x) * 3 + c] = 255;
  Image cropped{x1 - x0, y1 - y0, 3, {}};
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x)
      for (int c = 0; c < 3; ++c) cropped.pixels.push_back(src.at(x, y, c));
  for (auto [ow, oh] : {std::pair{32, 28}, {224, 224}, {75, 65}}) {
    const Image clipped = run(src, x0, y0, x1 - x0, y1 - y0, x0, y0, x1, y1, ow, oh, false);
    const Image unclipped = run(src, x0, y0, x1 - x0, y1 - y0, 0, 0, 120, 90, ow, oh, false);
    // Same as resizing the cropped image (what torchvision does), bit for bit.
    EXPECT_EQ(clipped.pixels, run_whole(cropped, ow, oh).pixels) << ow << "x" << oh;
    if (ow != x1 - x0) {
      EXPECT_NE(clipped.pixels, unclipped.pixels) << ow << "x" << oh;  // border pixels differ
      int64_t differ = 0;
      for (int x = 0; x < ow; ++x) differ += clipped.at(x, 0, 0) != unclipped.at(x, 0, 0);
      EXPECT_GT(differ, ow / 2) << "the top row sees the outside when the window ignores the valid range";
    }
  }
}

TEST(Resize, StridedSourceAndOutput) {
  std::mt19937 rng(11);
  const Image big = random_image(100, 80, 3, rng);
  // A view of a sub-rectangle: data offset, stride of the big image.
  const ImageView sub{big.pixels.data() + (10 * 100 + 7) * 3, 60, 50, 3, 100 * 3};
  Image packed{60, 50, 3, {}};
  for (int y = 10; y < 60; ++y)
    for (int x = 7; x < 67; ++x)
      for (int c = 0; c < 3; ++c) packed.pixels.push_back(big.at(x, y, c));
  const int64_t stride = 41 * 3 + 5;
  std::vector<uint8_t> out(stride * 30, 0xCD);
  resize_box_bilinear(sub, 1.5, 2, 55, 45, 0, 0, 60, 50, 41, 30, true, out.data(), stride);
  const Image want = run(packed, 1.5, 2, 55, 45, 0, 0, 60, 50, 41, 30, true);
  for (int y = 0; y < 30; ++y) {
    for (int i = 0; i < 41 * 3; ++i) ASSERT_EQ(out[y * stride + i], want.pixels[y * 41 * 3 + i]);
    for (int i = 41 * 3; i < stride; ++i) ASSERT_EQ(out[y * stride + i], 0xCD) << "wrote past the row";
  }
}

// torchvision's Resize(resize) then CenterCrop(crop), done as one resampling of the source box,
// against resizing the whole image and cropping (and zero padding) the result.
TEST(Resize, ResizeThenCenterCropInOnePass) {
  std::mt19937 rng(12);
  struct Case {
    int w, h, resize, crop;
  };
  Diff all;
  for (const Case& k : std::vector<Case>{{500, 375, 256, 224},
                                         {375, 500, 256, 224},
                                         {640, 480, 256, 224},
                                         {333, 517, 256, 224},
                                         {1372, 1024, 256, 224},
                                         {200, 150, 256, 224},  // upscaling
                                         {256, 300, 256, 224},  // short side already 256
                                         {500, 375, 200, 224},  // crop larger than the short side: pad
                                         {301, 500, 201, 224},  // odd padding
                                         {100, 90, 160, 224},     // padding on both axes
                                         {300, 700, 256, 224}}) {  // Pillow 13: vertical first
    const Image src = photo_like(k.w, k.h, 3, rng);
    const ResizeCropBox b = resize_center_crop_box(k.w, k.h, k.resize, k.crop);
    // Resize's pass order, Pillow <= 12's and Pillow 13's (decided on the whole resize).
    const PassOrder pillow13 = pillow13_pass_order(k.w, k.h, b.resized_width, b.resized_height);
    EXPECT_EQ(pillow13 == PassOrder::VerticalFirst, k.h == 700) << k.w << "x" << k.h;
    for (PassOrder order : {PassOrder::HorizontalFirst, pillow13}) {
      const Image full = run_whole(src, b.resized_width, b.resized_height, false, order);
      // torchvision: crop (and zero pad) the resized image.
      Image want{k.crop, k.crop, 3, std::vector<uint8_t>(size_t(k.crop) * k.crop * 3, 0)};
      const int pad_l = k.crop > b.resized_width ? (k.crop - b.resized_width) / 2 : 0;
      const int pad_t = k.crop > b.resized_height ? (k.crop - b.resized_height) / 2 : 0;
      const int pw = std::max(k.crop, b.resized_width), ph = std::max(k.crop, b.resized_height);
      const int left = int(std::nearbyint((pw - k.crop) / 2.0)), top = int(std::nearbyint((ph - k.crop) / 2.0));
      for (int y = 0; y < k.crop; ++y)
        for (int x = 0; x < k.crop; ++x) {
          const int sx = x + left - pad_l, sy = y + top - pad_t;  // in the unpadded resized image
          if (sx < 0 || sy < 0 || sx >= b.resized_width || sy >= b.resized_height) continue;
          for (int c = 0; c < 3; ++c) want.pixels[(size_t(y) * k.crop + x) * 3 + c] = full.at(sx, sy, c);
        }
      // One pass into the padded output.
      Image got{k.crop, k.crop, 3, std::vector<uint8_t>(size_t(k.crop) * k.crop * 3, 0)};
      const int64_t stride = int64_t(k.crop) * 3;
      resize_box_bilinear(src.view(), b.x, b.y, b.width, b.height, 0, 0, k.w, k.h, b.out_width, b.out_height, false,
                          got.pixels.data() + b.pad_top * stride + b.pad_left * 3, stride, order);
      const Diff d = compare(got, want);
      EXPECT_EQ(d.max, 0) << k.w << "x" << k.h;
      all.add(d);
    }
  }
  std::printf("[ resize  ] resize+crop in one pass vs resize then crop: max |diff| %d, %lld of %lld differ\n", all.max,
              (long long)all.mismatches, (long long)all.total);
}

TEST(Resize, Errors) {
  const Image src{4, 4, 3, std::vector<uint8_t>(48, 1)};
  std::vector<uint8_t> out(1000);
  auto message = [&](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message([&] { resize_box_bilinear(src.view(), 0, 0, 4, 4, 0, 0, 5, 4, 2, 2, false, out.data(), 6); })
                .find("valid range"),
            std::string::npos);
  EXPECT_NE(message([&] { resize_box_bilinear(src.view(), 0, 0, 0, 4, 0, 0, 4, 4, 2, 2, false, out.data(), 6); })
                .find("source box"),
            std::string::npos);
  EXPECT_NE(message([&] { resize_box_bilinear(src.view(), NAN, 0, 4, 4, 0, 0, 4, 4, 2, 2, false, out.data(), 6); })
                .find("source box"),
            std::string::npos);
  EXPECT_NE(message([&] { resize_box_bilinear(src.view(), 0, 0, 4, 4, 0, 0, 4, 4, 0, 2, false, out.data(), 6); })
                .find("output size"),
            std::string::npos);
  EXPECT_NE(message([&] { resize_box_bilinear(src.view(), 0, 0, 4, 4, 0, 0, 4, 4, 2, 2, false, out.data(), 5); })
                .find("output row stride"),
            std::string::npos);
}

TEST(Resize, Timing) {
  std::mt19937 rng(13);
  const Image src = photo_like(300, 300, 3, rng);
  const Image big = photo_like(500, 375, 3, rng);
  std::vector<uint8_t> out(300 * 300 * 3);
  // Best of 5 runs of 100 calls (other work on the machine only slows some runs).
  auto time_us = [&](const Image& im, double bx, double by, double bw, double bh, int ow, int oh) {
    resize_box_bilinear(im.view(), bx, by, bw, bh, 0, 0, im.width, im.height, ow, oh, false, out.data(), ow * 3);
    double best = 1e30;
    for (int run = 0; run < 5; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < 100; ++r)
        resize_box_bilinear(im.view(), bx, by, bw, bh, 0, 0, im.width, im.height, ow, oh, r % 2, out.data(), ow * 3);
      best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    return best / 100;
  };
  std::printf("[ resize  ] one core, us per call: 300x300 -> 224x224 RGB %.1f (horizontal pass only: -> 224x300 %.1f; "
              "vertical only: -> 300x224 %.1f); 500x375 -> 224x224 %.1f; 100x80 box -> 224x224 (upscale) %.1f\n",
              time_us(src, 0, 0, 300, 300, 224, 224), time_us(src, 0, 0, 300, 300, 224, 300),
              time_us(src, 0, 0, 300, 300, 300, 224), time_us(big, 0, 0, 500, 375, 224, 224),
              time_us(big, 50, 40, 100, 80, 224, 224));
}

}  // namespace
}  // namespace kiln
