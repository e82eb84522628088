// The policies import the search from here (they may not import the driver package); it lives in vmm, the lowest layer.
export { lowerBound, lowerBoundOf } from "@gmlake/vmm";
