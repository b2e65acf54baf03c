// kiln's CBR forward and backward against its convolutions alone, one thread: the difference is
// kiln's BatchNorm + ReLU + mask passes (the same layer shapes as onednn_batchnorm.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>
#include "ops/cbr/cbr_cpu.h"
#include "ops/conv/conv_cpu.h"
using namespace kiln; using namespace kiln::cpu;
double med(const std::function<void()>& f) { std::vector<double> t; for (int r = 0; r < 11; ++r) { auto a = std::chrono::steady_clock::now(); f(); t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count()); } std::sort(t.begin(), t.end()); return t[5]; }
int main() {
  int shapes[][4] = {{64, 56, 64, 3}, {128, 28, 128, 3}, {256, 14, 256, 3}, {512, 7, 512, 3}, {3, 224, 64, 7}};
  for (auto& s : shapes) {
    const int C = s[0], K = s[2], R = s[3];
    const bool stem = R == 7;
    ConvGeom g = ConvGeom::make({32, s[1], s[1], C}, {K, R, R, C}, stem ? 2 : 1, R / 2);
    const size_t nx = size_t(g.n) * g.h * g.w * g.c, ny = size_t(g.n) * g.ho * g.wo * g.k, nw = size_t(g.k) * g.r * g.s * g.c;
    std::mt19937 gen(1); std::normal_distribution<float> nd;
    std::vector<float> x(nx), w(nw), dy(ny), conv(ny), y(ny), dconv(ny), dx(nx), dw(nw), gam(K, 1.f), bet(K, 0.1f), mean(K), inv(K), rm(K), rv(K, 1.f), dg(K), db(K);
    for (auto& v : x) v = nd(gen); for (auto& v : w) v = 0.05f * nd(gen); for (auto& v : dy) v = nd(gen);
    std::vector<uint8_t> mask(cbr_mask_bytes(int64_t(ny)));
    CbrForwardTensors<float> f; f.x = x.data(); f.w = w.data(); f.gamma = gam.data(); f.beta = bet.data(); f.conv_out = conv.data(); f.y = y.data(); f.saved_mean = mean.data(); f.saved_inv_std = inv.data(); f.bitmask = mask.data(); f.running_mean = rm.data(); f.running_var = rv.data();
    CbrBackwardTensors<float> b; b.dy = dy.data(); b.bitmask = mask.data(); b.conv_out = conv.data(); b.x = x.data(); b.w = w.data(); b.gamma = gam.data(); b.saved_mean = mean.data(); b.saved_inv_std = inv.data(); b.dx = stem ? nullptr : dx.data(); b.dw = dw.data(); b.dgamma = dg.data(); b.dbeta = db.data(); b.dconv = dconv.data();
    const double cf = med([&] { conv_fwd<float>(g, x.data(), w.data(), nullptr, conv.data()); });
    const double bf = med([&] { cbr_forward<float>(g, f, 1e-5, 0.1); });
    const double cb = med([&] { conv_wgrad<float>(g, dy.data(), x.data(), dw.data(), nullptr); if (!stem) conv_dgrad<float>(g, dy.data(), w.data(), dx.data()); });
    const double bb = med([&] { cbr_backward<float>(g, b); });
    std::printf("N32 C%d K%d %dx%d out %ld^2: conv fwd %.2f, CBR fwd %.2f -> BN+ReLU+mask %.2f ms | conv bwd %.2f, CBR bwd %.2f -> %.2f ms\n", C, K, R, R, long(g.ho), cf, bf, bf - cf, cb, bb, bb - cb);
  }
}
