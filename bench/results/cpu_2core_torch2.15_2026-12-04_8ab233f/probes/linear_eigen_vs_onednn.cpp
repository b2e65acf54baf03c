#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>
#include <dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <functional>
using namespace dnnl; using T = memory::format_tag; using dt = memory::data_type;
using RM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
double med(std::function<void()> f){ std::vector<double> ts; for(int r=0;r<50;++r){auto t0=std::chrono::steady_clock::now(); f(); ts.push_back(std::chrono::duration<double,std::milli>(std::chrono::steady_clock::now()-t0).count());} std::sort(ts.begin(),ts.end()); return ts[25]; }
int main(){
  engine e(engine::kind::cpu,0); stream s(e);
  // y[n,out] = x[n,in] * w[out,in]^T ; dx[n,in] = dy[n,out] * w[out,in] ; dw[out,in] = dy^T[out,n] * x[n,in]
  int shapes[][3] = {{64,1600,128},{64,128,10},{32,512,1000}};
  for (auto& sh : shapes) {
    int n=sh[0], in=sh[1], out=sh[2];
    RM x = RM::Random(n,in), w = RM::Random(out,in), dy = RM::Random(n,out), y(n,out), dx(n,in), dw(out,in);
    double e1 = med([&]{ y.noalias() = x * w.transpose(); });
    double e2 = med([&]{ dx.noalias() = dy * w; });
    double e3 = med([&]{ dw.noalias() = dy.transpose() * x; });
    auto mm = [&](memory::dims ad, memory::dims as, memory::dims bd, memory::dims bs, memory::dims cd, const float* A, const float* B, float* C){
      memory::desc a(ad, dt::f32, as), b(bd, dt::f32, bs), c(cd, dt::f32, memory::dims{cd[1],1});
      auto pd = matmul::primitive_desc(e, a, b, c); matmul p(pd);
      memory Am(a,e,(void*)A), Bm(b,e,(void*)B), Cm(c,e,C);
      printf("   %s\n", pd.impl_info_str());
      return med([&]{ p.execute(s, {{DNNL_ARG_SRC,Am},{DNNL_ARG_WEIGHTS,Bm},{DNNL_ARG_DST,Cm}}); });
    };
    double o1 = mm({n,in},{in,1},{in,out},{1,in},{n,out}, x.data(), w.data(), y.data());
    double o2 = mm({n,out},{out,1},{out,in},{in,1},{n,in}, dy.data(), w.data(), dx.data());
    double o3 = mm({out,n},{1,out},{n,in},{in,1},{out,in}, dy.data(), x.data(), dw.data());
    printf("n%d in%d out%d: Eigen fwd %.3f dgrad %.3f wgrad %.3f | oneDNN matmul %.3f %.3f %.3f ms\n", n,in,out,e1,e2,e3,o1,o2,o3);
  }
}
