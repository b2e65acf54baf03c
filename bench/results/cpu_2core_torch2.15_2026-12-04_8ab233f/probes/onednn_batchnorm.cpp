#include <dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <random>
using namespace dnnl; using T = memory::format_tag; using dt = memory::data_type;
int main(int argc, char** argv){
  engine e(engine::kind::cpu,0); stream s(e);
  int N=32,C=64,H=56;
  if (argc>1) { C=atoi(argv[1]); H=atoi(argv[2]); }
  memory::desc d({N,C,H,H}, dt::f32, T::nhwc);
  auto flags = normalization_flags::use_scale | normalization_flags::use_shift | normalization_flags::fuse_norm_relu;
  auto fpd = batch_normalization_forward::primitive_desc(e, prop_kind::forward_training, d, d, 1e-5f, flags);
  auto bpd = batch_normalization_backward::primitive_desc(e, prop_kind::backward, d, d, d, 1e-5f, flags, fpd);
  printf("fwd %s bwd %s\n", fpd.impl_info_str(), bpd.impl_info_str());
  size_t n = size_t(N)*C*H*H; std::vector<float> x(n), y(n), dy(n), dx(n), sc(C,1.f), sh(C,0.f), mean(C), var(C), dsc(C), dsh(C);
  std::mt19937 g(1); std::normal_distribution<float> nd; for (auto& v : x) v = nd(g); for (auto& v : dy) v = nd(g);
  std::vector<uint8_t> ws(fpd.workspace_desc().get_size());
  memory X(d,e,x.data()), Y(d,e,y.data()), DY(d,e,dy.data()), DX(d,e,dx.data());
  memory::desc cd({C}, dt::f32, T::x);
  memory SC(cd,e,sc.data()), SH(cd,e,sh.data()), M(cd,e,mean.data()), V(cd,e,var.data()), DSC(cd,e,dsc.data()), DSH(cd,e,dsh.data()), W(fpd.workspace_desc(), e, ws.data());
  batch_normalization_forward f(fpd); batch_normalization_backward b(bpd);
  std::vector<double> tf, tb;
  for (int r=0;r<15;++r){
    auto t0=std::chrono::steady_clock::now();
    f.execute(s,{{DNNL_ARG_SRC,X},{DNNL_ARG_DST,Y},{DNNL_ARG_SCALE,SC},{DNNL_ARG_SHIFT,SH},{DNNL_ARG_MEAN,M},{DNNL_ARG_VARIANCE,V},{DNNL_ARG_WORKSPACE,W}});
    auto t1=std::chrono::steady_clock::now();
    b.execute(s,{{DNNL_ARG_SRC,X},{DNNL_ARG_DIFF_DST,DY},{DNNL_ARG_SCALE,SC},{DNNL_ARG_MEAN,M},{DNNL_ARG_VARIANCE,V},{DNNL_ARG_WORKSPACE,W},{DNNL_ARG_DIFF_SRC,DX},{DNNL_ARG_DIFF_SCALE,DSC},{DNNL_ARG_DIFF_SHIFT,DSH}});
    auto t2=std::chrono::steady_clock::now();
    tf.push_back(std::chrono::duration<double,std::milli>(t1-t0).count()); tb.push_back(std::chrono::duration<double,std::milli>(t2-t1).count());
  }
  std::sort(tf.begin(),tf.end()); std::sort(tb.begin(),tb.end());
  printf("N%d C%d H%d: oneDNN BN+ReLU forward %.2f ms, backward %.2f ms (%.1f MB per tensor)\n", N,C,H, tf[7], tb[7], n*4/1e6);
}
