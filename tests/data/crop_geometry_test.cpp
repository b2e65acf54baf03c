// RandomResizedCrop's box sampling and Resize + CenterCrop's box, against torchvision's rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "data/image/crop_geometry.h"
#include "kiln/error.h"

namespace kiln {
namespace {

std::string error_message(const RandomResizedCropParams& p) {
  try {
    check_random_resized_crop(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(CropGeometry, RoundHalfEvenIsPythonRound) {
  EXPECT_EQ(round_half_even(0.5), 0.0);
  EXPECT_EQ(round_half_even(1.5), 2.0);
  EXPECT_EQ(round_half_even(2.5), 2.0);
  EXPECT_EQ(round_half_even(58.5), 58.0);
  EXPECT_EQ(round_half_even(59.5), 60.0);
  EXPECT_EQ(round_half_even(2.4999999), 2.0);
  EXPECT_EQ(round_half_even(2.5000001), 3.0);
  EXPECT_EQ(round_half_even(-1.5), -2.0);
  EXPECT_EQ(round_half_even(-2.5), -2.0);
  EXPECT_EQ(round_half_even(13.333), 13.0);
  EXPECT_EQ(round_half_even(0.49999999999999994), 0.0);  // x + 0.5 rounds up to 1 in double
}

TEST(CropGeometry, SplitRngDraws) {
  SplitRng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    EXPECT_NE(x, c.next());
  }
  SplitRng r(7);
  double sum = 0;
  std::vector<int> hist(7, 0);
  const int n = 70000;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    const uint64_t k = r.below(7);
    ASSERT_LT(k, 7u);
    ++hist[k];
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);  // sd of the mean 0.0011
  for (int h : hist) EXPECT_NEAR(h, n / 7, 500);  // sd ~ 93
  EXPECT_EQ(r.below(1), 0u);
  EXPECT_EQ(r.below(0), 0u);
}

TEST(CropGeometry, BoxesInsideTheImage) {
  const RandomResizedCropParams p;
  for (auto [w, h] :
       {std::pair{500, 375}, {375, 500}, {1000, 10}, {10, 1000}, {1, 1}, {2, 3}, {4000, 3000}, {224, 224}}) {
    for (uint64_t key = 0; key < 3000; ++key) {
      const CropBox b = random_resized_crop_box(w, h, p, mix64(key));
      ASSERT_GT(b.width, 0);
      ASSERT_GT(b.height, 0);
      ASSERT_GE(b.x, 0);
      ASSERT_GE(b.y, 0);
      ASSERT_LE(b.x + b.width, w) << w << "x" << h;
      ASSERT_LE(b.y + b.height, h) << w << "x" << h;
    }
  }
}

TEST(CropGeometry, DeterministicPerKey) {
  const RandomResizedCropParams p;
  std::set<std::tuple<int, int, int, int>> distinct;
  for (uint64_t key = 0; key < 1000; ++key) {
    const CropBox a = random_resized_crop_box(500, 375, p, key);
    const CropBox b = random_resized_crop_box(500, 375, p, key);
    EXPECT_EQ(std::tie(a.x, a.y, a.width, a.height), std::tie(b.x, b.y, b.width, b.height));
    distinct.insert({a.x, a.y, a.width, a.height});
  }
  EXPECT_GE(distinct.size(), 995u);
}

// The same sampling with std::mt19937_64 and std::nearbyint (round half to even) as an independent
// model of torchvision's get_params; returns {w, h}.
std::pair<int, int> model_size(int width, int height, const RandomResizedCropParams& p, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> scale(p.scale_min, p.scale_max);
  std::uniform_real_distribution<double> log_ratio(std::log(p.ratio_min), std::log(p.ratio_max));
  const double area = double(width) * height;
  for (int i = 0; i < 10; ++i) {
    const double target = area * scale(rng);
    const double aspect = std::exp(log_ratio(rng));
    const int w = int(std::nearbyint(std::sqrt(target * aspect)));
    const int h = int(std::nearbyint(std::sqrt(target / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) return {w, h};
  }
  return {width, height};  // the fallback for an in-range aspect ratio
}

TEST(CropGeometry, DistributionMatchesTorchvisionModel) {
  const RandomResizedCropParams p;
  const int W = 500, H = 375, n = 20000;
  // Reference moments by Monte Carlo.
  std::mt19937_64 rng(2024);
  const int m = 400000;
  double ref_area = 0, ref_area_sq = 0, ref_log = 0, ref_log_sq = 0;
  for (int i = 0; i < m; ++i) {
    auto [w, h] = model_size(W, H, p, rng);
    const double a = double(w) * h / (double(W) * H), l = std::log(double(w) / h);
    ref_area += a;
    ref_area_sq += a * a;
    ref_log += l;
    ref_log_sq += l * l;
  }
  ref_area /= m;
  ref_log /= m;
  const double sd_area = std::sqrt(ref_area_sq / m - ref_area * ref_area);
  const double sd_log = std::sqrt(ref_log_sq / m - ref_log * ref_log);

  double area = 0, logs = 0, xpos = 0, ypos = 0;
  int xn = 0, yn = 0;
  for (int i = 0; i < n; ++i) {
    const CropBox b = random_resized_crop_box(W, H, p, mix64(0x1234 + uint64_t(i)));
    area += double(b.width) * b.height / (double(W) * H);
    const double l = std::log(double(b.width) / b.height);
    logs += l;
    // The aspect ratio stays in range up to the rounding of w and h (and the fallback is the whole
    // 4:3 image, in range too).
    const double slack = 0.5 / b.width + 0.5 / b.height + 1e-12;
    ASSERT_GE(l, std::log(p.ratio_min) - slack) << b.width << "x" << b.height;
    ASSERT_LE(l, std::log(p.ratio_max) + slack) << b.width << "x" << b.height;
    // Offsets uniform over the free range.
    if (b.width < W) xpos += double(b.x) / (W - b.width), ++xn;
    if (b.height < H) ypos += double(b.y) / (H - b.height), ++yn;
  }
  area /= n;
  logs /= n;
  // Tolerance: 5 standard errors of the 20,000-sample mean (the reference's own error is 4.5x smaller).
  const double tol_area = 5 * sd_area / std::sqrt(double(n)), tol_log = 5 * sd_log / std::sqrt(double(n));
  std::printf("[ crop    ] area fraction mean %.5f (model %.5f, tol %.5f); "
              "log aspect mean %.5f (model %.5f, tol %.5f)\n",
              area, ref_area, tol_area, logs, ref_log, tol_log);
  EXPECT_NEAR(area, ref_area, tol_area);
  EXPECT_NEAR(logs, ref_log, tol_log);
  EXPECT_NEAR(xpos / xn, 0.5, 0.01);  // sd of a uniform(0,1) mean over ~20,000: 0.002
  EXPECT_NEAR(ypos / yn, 0.5, 0.01);
}

TEST(CropGeometry, FallbackIsTheClampedCentralCrop) {
  const RandomResizedCropParams p;
  // 1000x10: every attempt needs h >= sqrt(800 * 3/4) > 10, so all fail; the ratio 100 > 4/3 gives
  // h = 10, w = round(10 * 4/3) = 13, centered: x = (1000 - 13) / 2 = 493.
  for (uint64_t key = 0; key < 200; ++key) {
    const CropBox b = random_resized_crop_box(1000, 10, p, key);
    EXPECT_EQ(std::tie(b.x, b.y, b.width, b.height), std::make_tuple(493, 0, 13, 10));
    const CropBox t = random_resized_crop_box(10, 1000, p, key);  // w = 10, h = round(10 / (3/4)) = 13
    EXPECT_EQ(std::tie(t.x, t.y, t.width, t.height), std::make_tuple(0, 493, 10, 13));
  }
  // An in-range image whose attempts all fail (scale above 1): the whole image.
  RandomResizedCropParams big;
  big.scale_min = 1.5;
  big.scale_max = 2.0;
  const CropBox b = random_resized_crop_box(400, 300, big, 99);
  EXPECT_EQ(std::tie(b.x, b.y, b.width, b.height), std::make_tuple(0, 0, 400, 300));
}

TEST(CropGeometry, FullScaleSquareRatioIsTheWholeSquare) {
  RandomResizedCropParams p;
  p.scale_min = p.scale_max = 1.0;
  p.ratio_min = p.ratio_max = 1.0;
  for (uint64_t key = 0; key < 50; ++key) {
    const CropBox b = random_resized_crop_box(300, 300, p, key);
    EXPECT_EQ(std::tie(b.x, b.y, b.width, b.height), std::make_tuple(0, 0, 300, 300));
  }
}

TEST(CropGeometry, ResizeCenterCropMatchesTorchvision) {
  // 500x375, Resize(256): short side 375 -> 256, long int(256 * 500 / 375) = int(341.33) = 341.
  // CenterCrop(224): left = round((341 - 224) / 2) = round(58.5) = 58 (half to even), top = 16.
  ResizeCropBox b = resize_center_crop_box(500, 375, 256, 224);
  EXPECT_EQ(b.resized_width, 341);
  EXPECT_EQ(b.resized_height, 256);
  EXPECT_DOUBLE_EQ(b.x, 58 * 500.0 / 341);
  EXPECT_DOUBLE_EQ(b.y, 16 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(b.width, 224 * 500.0 / 341);
  EXPECT_DOUBLE_EQ(b.height, 224 * 375.0 / 256);
  EXPECT_EQ(std::tie(b.out_width, b.out_height, b.pad_left, b.pad_top), std::make_tuple(224, 224, 0, 0));
  // Portrait: the same transposed.
  b = resize_center_crop_box(375, 500, 256, 224);
  EXPECT_EQ(std::tie(b.resized_width, b.resized_height), std::make_tuple(256, 341));
  EXPECT_DOUBLE_EQ(b.x, 16 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(b.y, 58 * 500.0 / 341);
  // 1372x1024: long int(256 * 1372 / 1024) = 343; left = round(59.5) = 60 (half to even, upward).
  b = resize_center_crop_box(1372, 1024, 256, 224);
  EXPECT_EQ(b.resized_width, 343);
  EXPECT_DOUBLE_EQ(b.x, 60 * 1372.0 / 343);
  EXPECT_DOUBLE_EQ(b.y, 16 * 4.0);
  // Crop larger than the resized height: torchvision pads (224 - 200) / 2 = 12 rows on top and
  // keeps all 200 rows; the width 266 (int(200 * 500 / 375)) is cropped at round(21) = 21.
  b = resize_center_crop_box(500, 375, 200, 224);
  EXPECT_EQ(std::tie(b.resized_width, b.resized_height), std::make_tuple(266, 200));
  EXPECT_EQ(std::tie(b.out_width, b.out_height, b.pad_left, b.pad_top), std::make_tuple(224, 200, 0, 12));
  EXPECT_DOUBLE_EQ(b.x, 21 * 500.0 / 266);
  EXPECT_DOUBLE_EQ(b.y, 0);
  EXPECT_DOUBLE_EQ(b.height, 375);
  // Odd padding (23 rows: 11 on top, 12 below), both axes.
  b = resize_center_crop_box(100, 90, 201, 224);  // resized 223x201
  EXPECT_EQ(std::tie(b.resized_width, b.resized_height), std::make_tuple(223, 201));
  EXPECT_EQ(std::tie(b.out_width, b.out_height, b.pad_left, b.pad_top), std::make_tuple(223, 201, 0, 11));
  EXPECT_DOUBLE_EQ(b.width, 100);
  EXPECT_DOUBLE_EQ(b.height, 90);
  // Short side already the resize size: no scaling.
  b = resize_center_crop_box(256, 300, 256, 224);
  EXPECT_EQ(std::tie(b.resized_width, b.resized_height), std::make_tuple(256, 300));
  EXPECT_DOUBLE_EQ(b.x, 16);
  EXPECT_DOUBLE_EQ(b.y, 38);
  EXPECT_DOUBLE_EQ(b.width, 224);
}

TEST(CropGeometry, ErrorsNameTheOption) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  RandomResizedCropParams ok;
  EXPECT_EQ(error_message(ok), "no error");
  auto with = [&](double RandomResizedCropParams::*field, double value) {
    RandomResizedCropParams p;
    p.*field = value;
    return error_message(p);
  };
  EXPECT_NE(with(&RandomResizedCropParams::scale_min, 0).find("scale_min"), std::string::npos);
  EXPECT_NE(with(&RandomResizedCropParams::scale_min, -0.1).find("scale_min"), std::string::npos);
  EXPECT_NE(with(&RandomResizedCropParams::scale_min, nan).find("scale_min"), std::string::npos);
  EXPECT_NE(with(&RandomResizedCropParams::scale_max, 0.05).find("scale_max"), std::string::npos);
  EXPECT_NE(with(&RandomResizedCropParams::scale_max, inf).find("scale_max"), std::string::npos);
  EXPECT_NE(with(&RandomResizedCropParams::ratio_min, 0).find("ratio_min"), std::string::npos);
  EXPECT_NE(with(&RandomResizedCropParams::ratio_min, 2).find("ratio_max"), std::string::npos);
  EXPECT_NE(with(&RandomResizedCropParams::ratio_max, nan).find("ratio_max"), std::string::npos);
  EXPECT_EQ(with(&RandomResizedCropParams::scale_max, 1.5), "no error");  // torchvision allows it
  for (auto [w, h, r, c] : {std::tuple{0, 10, 256, 224}, {10, 10, 0, 224}, {10, 10, 256, -1}}) {
    bool threw = false;
    try {
      resize_center_crop_box(w, h, r, c);
    } catch (const Error&) {
      threw = true;
    }
    EXPECT_TRUE(threw) << w << " " << h << " " << r << " " << c;
  }
}

}  // namespace
}  // namespace kiln
