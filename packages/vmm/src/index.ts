export * from "./driver.js";
