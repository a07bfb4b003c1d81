/* Spike for docs/benchmarks.md, "Towards a 50 ms move" (not built by cargo or CI): times a
   1-child MPI_Comm_spawn in phases (call -> child main -> MPI_Init -> return). Run with and
   without UCX_MEM_EVENTS=no: $MPICC -O2 -o s spawn-phases.c && mpiexec -n 2 ./s */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_REALTIME,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  double t_main=now();
  if(argc>2){printf("load %.1f ms\n",(t_main-atof(argv[1]))*1e3);return 0;}
  MPI_Comm parent;
  MPI_Init(&argc,&argv);
  double t_init=now();
  MPI_Comm_get_parent(&parent);
  if(parent!=MPI_COMM_NULL){
    double t_call=atof(argv[1]);
    double v[3]={t_call,t_main,t_init};
    MPI_Send(v,3,MPI_DOUBLE,0,0,parent);
    MPI_Comm_disconnect(&parent);
    MPI_Finalize();return 0;
  }
  int rank;MPI_Comm_rank(MPI_COMM_WORLD,&rank);
  for(int k=0;k<5;k++){
    char buf[64];double t0=now();snprintf(buf,64,"%.6f",t0);
    char*args[]={buf,NULL};MPI_Comm child;
    MPI_Comm_spawn(argv[0],args,1,MPI_INFO_NULL,0,MPI_COMM_WORLD,&child,MPI_ERRCODES_IGNORE);
    double t1=now();
    if(rank==0){double v[3];MPI_Recv(v,3,MPI_DOUBLE,0,0,child,MPI_STATUS_IGNORE);
      printf("spawn %.1f ms: call->main %.1f, MPI_Init %.1f, init->return %.1f\n",(t1-t0)*1e3,(v[1]-v[0])*1e3,(v[2]-v[1])*1e3,(t1-v[2])*1e3);}
    MPI_Comm_disconnect(&child);
  }
  MPI_Finalize();return 0;}
