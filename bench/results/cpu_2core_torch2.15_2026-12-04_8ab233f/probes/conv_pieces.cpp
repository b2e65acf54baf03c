#include <dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
using namespace dnnl; using T = memory::format_tag; using dt = memory::data_type;
engine e(engine::kind::cpu,0); stream s(e);
double run(int mb, int pieces, int ic, int oc, int hw, int which) {
  memory::desc src({mb,ic,hw,hw}, dt::f32, T::nhwc), dst({mb,oc,hw,hw}, dt::f32, T::nhwc), wa({oc,ic,3,3}, dt::f32, T::any);
  auto fpd = convolution_forward::primitive_desc(e, prop_kind::forward_training, algorithm::convolution_direct, src, wa, dst, {1,1},{1,1},{1,1});
  primitive p; memory::desc wd;
  if (which==0) { p = convolution_forward(fpd); wd = fpd.weights_desc(); }
  else if (which==1) { auto pd = convolution_backward_data::primitive_desc(e, algorithm::convolution_direct, src, wa, dst, {1,1},{1,1},{1,1}, fpd); p = convolution_backward_data(pd); wd = pd.weights_desc(); }
  else { auto pd = convolution_backward_weights::primitive_desc(e, algorithm::convolution_direct, src, wa, dst, {1,1},{1,1},{1,1}, fpd); p = convolution_backward_weights(pd); wd = pd.diff_weights_desc(); }
  int total = mb*pieces;
  std::vector<float> X(size_t(total)*ic*hw*hw, 0.5f), Y(size_t(total)*oc*hw*hw, 0.25f), W(wd.get_size()/4, 0.1f);
  memory wm(wd, e, W.data());
  std::vector<double> ts;
  for (int rep=0; rep<30; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i=0;i<pieces;++i) {
      memory xm(src, e, X.data()+size_t(i)*mb*ic*hw*hw), ym(dst, e, Y.data()+size_t(i)*mb*oc*hw*hw);
      if (which==0) p.execute(s, {{DNNL_ARG_SRC,xm},{DNNL_ARG_WEIGHTS,wm},{DNNL_ARG_DST,ym}});
      else if (which==1) p.execute(s, {{DNNL_ARG_DIFF_SRC,xm},{DNNL_ARG_WEIGHTS,wm},{DNNL_ARG_DIFF_DST,ym}});
      else p.execute(s, {{DNNL_ARG_SRC,xm},{DNNL_ARG_DIFF_WEIGHTS,wm},{DNNL_ARG_DIFF_DST,ym}});
    }
    s.wait();
    ts.push_back(std::chrono::duration<double,std::milli>(std::chrono::steady_clock::now()-t0).count());
  }
  std::sort(ts.begin(), ts.end()); return ts[ts.size()/2];
}
int main(int argc, char** argv){
  int shapes[][3] = {{32,32,20},{64,64,10},{32,64,10}};
  for (auto& sh : shapes) for (int w=0; w<3; ++w) {
    printf("ic%d oc%d hw%d %s: mb4x16 %.3f  mb8x8 %.3f  mb16x4 %.3f  mb64x1 %.3f ms\n", sh[0], sh[1], sh[2], w==0?"fwd":w==1?"bwd_d":"bwd_w",
      run(4,16,sh[0],sh[1],sh[2],w), run(8,8,sh[0],sh[1],sh[2],w), run(16,4,sh[0],sh[1],sh[2],w), run(64,1,sh[0],sh[1],sh[2],w));
  }
}
